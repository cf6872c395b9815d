-- One busy-signal sample per GPU (or MIG instance), metric and timestamp, for the days built.
-- Only the two busy metrics are kept: the cost models need nothing else.
-- The per-sample definition of the rules: int_gpu_busy applies the same filters, busy rule and
-- dedupe in aggregate form in one pass (keep the two in step); this model's tests check them.
-- `not materialized`: each branch below re-reads the Parquet/table instead of DuckDB
-- buffering every sample of the range in memory.
with source as not materialized (

    select * from {{ source('raw_dcgm_samples') }}
    where ts >= {{ var('day_from') }}::timestamp
      and ts < {{ var('day_to') }}::timestamp + interval 1 day
      and metric in ('DCGM_FI_PROF_GR_ENGINE_ACTIVE', 'DCGM_FI_DEV_GPU_UTIL')

),

normalised as not materialized (

    select
        cast(ts as date) as day,
        ts,
        lower(hostname) as hostname,
        gpu,
        uuid,
        model_name,
        -- '' = the whole GPU (no MIG instance), so the key never holds a null
        coalesce(gpu_instance_id, '') as gpu_instance_id,
        gpu_instance_profile,
        metric,
        -- GPU_UTIL is a percentage; engine-active is already a 0..1 fraction
        case when metric = 'DCGM_FI_DEV_GPU_UTIL' then value / 100.0 else value end as busy_raw,
        nullif(namespace, '') as namespace,
        nullif(pod, '') as pod,
        nullif(container, '') as container,
        source,
        source_line
    from source
    -- values near 2^63 are DCGM blank sentinels, not data
    where value is not null and not isnan(value) and value >= 0 and value < 1e15

),

multi_source as (

    -- node-days fed by more than one source (a live scrape and a history file overlap)
    select day, hostname
    from normalised
    group by day, hostname
    -- hashes, not the strings: min/max over 64-bit ints is ~3x cheaper (a collision would only
    -- skip a dedupe, and the unique test on this model would then fail)
    having min(hash(source)) <> max(hash(source))

),

deduped as (

    -- single-source node-days pass as they are (an anti join with an empty side costs nothing);
    -- the others keep one sample per GPU, metric and ts
    select n.* from normalised as n
    anti join multi_source as g
        on g.day = n.day and g.hostname = n.hostname
    union all
    select n.* from normalised as n
    {{ first_of_multi_source('n') }}

),

final as (

    select
        day,
        ts,
        hostname,
        gpu,
        gpu_instance_id,
        gpu_instance_profile,
        uuid,
        model_name,
        metric,
        -- decimal, so sums are exact and a re-run gives identical rows (float sums depend on order)
        cast(least(greatest(busy_raw, 0.0), 1.0) as decimal(9, 6)) as busy,
        namespace,
        pod,
        container
    from deduped

)

select * from final
