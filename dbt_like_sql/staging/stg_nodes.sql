-- Nodes of the cluster inventory per day (GPU nodes and CPU nodes, has_gpus tells them apart): the
-- day's latest snapshot of each node, or, for a day without a snapshot, the newest earlier snapshot
-- day no older than node_snapshot_max_age_days.
-- instances: every cloud instance (provider identity) the name stood for during the day, with the
-- time it did [valid_from, valid_to): a node replaced under the same name (a new instance id the
-- same day) lists both, so both instances' bills price the node. An instance is valid from its
-- Node object's creationTimestamp (else from the last snapshot that still showed the instance
-- before it; the first instance known to a name: always) until the first snapshot showing the
-- next instance under the name (the last: for ever). Snapshots of the next day are read too, so
-- a replacement seen first after midnight still names its day.
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

instance_source as (

    -- a snapshot's time: snapshot_at (the file's modification time), or the end of the day it was
    -- loaded for when that time is not on that day (a month of saved snapshots copied at once)
    select
        node, provider_key, alt_provider_key, created_at,
        case when day is null or cast(snapshot_at as date) = day then snapshot_at
             else cast(day as timestamp) + interval 1 day - interval 1 microsecond end as snapshot_at
    from {{ source('raw_nodes') }}
    where provider_key is not null
      and coalesce(day, cast(snapshot_at as date))
        between {{ var('day_from') }}::date - cast({{ var('node_snapshot_max_age_days') }} as integer)
        and {{ var('day_to') }}::date + 1

),

seen as (

    -- an instance: a provider identity and its second one (GKE re-creates an instance under the same
    -- name and self link with a new numeric id, which GCP may bill under)
    select
        node,
        provider_key,
        alt_provider_key,
        min(snapshot_at) as seen_from,
        max(snapshot_at) as seen_to,
        min(created_at) as created_at
    from instance_source
    group by node, provider_key, alt_provider_key

),

windows as (

    select
        node,
        provider_key,
        alt_provider_key,
        created_at,
        case when lag(seen_to) over w is null then '-infinity'::timestamp
             else coalesce(created_at, lag(seen_to) over w) end as valid_from,
        coalesce(lead(seen_from) over w, 'infinity'::timestamp) as valid_to
    from seen
    window w as (partition by node order by coalesce(created_at, seen_from), seen_from, provider_key, alt_provider_key)

),

instances as (

    select
        d.day,
        w.node,
        list({'provider_key': w.provider_key, 'alt_provider_key': w.alt_provider_key,
              'valid_from': w.valid_from, 'valid_to': w.valid_to, 'created_at': w.created_at}
             order by w.valid_from, w.provider_key, w.alt_provider_key) as instances
    from days as d
    inner join windows as w
        on w.valid_from < cast(d.day as timestamp) + interval 1 day and w.valid_to > cast(d.day as timestamp)
    group by d.day, w.node

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
        i.instances,
        snapshot_day,
        snapshot_at
    from latest as l
    left join instances as i using (day, node)

)

select * from final
