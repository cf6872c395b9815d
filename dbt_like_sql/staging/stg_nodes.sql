-- Nodes of the cluster inventory per day (GPU nodes and CPU nodes, has_gpus tells them apart): the
-- day's latest snapshot of each node, or, for a day without a snapshot, the newest earlier snapshot
-- day no older than node_snapshot_max_age_days.
with days as (

    select cast(d as date) as day
    from unnest(generate_series(
        {{ var('day_from') }}::timestamp, {{ var('day_to') }}::timestamp, interval 1 day
    )) as t(d)

),

source as (

    select *, coalesce(day, cast(snapshot_at as date)) as snapshot_day
    from {{ source('raw_nodes') }}
    where coalesce(day, cast(snapshot_at as date))
        between {{ var('day_from') }}::date - cast({{ var('node_snapshot_max_age_days') }} as integer)
        and {{ var('day_to') }}::date

),

chosen as (

    -- the snapshot day each built day uses
    select d.day, max(s.snapshot_day) as snapshot_day
    from days as d
    inner join (select distinct snapshot_day from source) as s
        on s.snapshot_day <= d.day
        and s.snapshot_day >= d.day - cast({{ var('node_snapshot_max_age_days') }} as integer)
    group by d.day

),

latest as (

    select
        c.day,
        s.*
    from chosen as c
    inner join source as s on s.snapshot_day = c.snapshot_day
    qualify row_number() over (partition by c.day, s.node order by s.snapshot_at desc, s.source, s.source_row) = 1

),

final as (

    select
        day,
        node,
        provider_id,
        provider,
        provider_key,
        alt_provider_key,
        instance_type,
        gpu_product,
        node_pool,
        -- physical GPUs: the device plugin's capacity, else GPU feature discovery's count label
        -- (with MIG's mixed strategy, nvidia.com/gpu capacity is 0 and the slices are nvidia.com/mig-*)
        cast(coalesce(nullif(gpu_capacity, 0), gpu_count_label, 0) as integer) as gpus,
        coalesce(mig_devices, 0) as mig_devices,
        mig_capacity,
        coalesce(nullif(gpu_capacity, 0), gpu_count_label, 0) > 0 or coalesce(mig_devices, 0) > 0 as has_gpus,
        cpu_capacity,
        memory_capacity,
        taints,
        labels,
        snapshot_day,
        snapshot_at
    from latest

)

select * from final
