-- Busy samples summed per GPU, pod, metric and day, from the hourly rollup written at ingestion.
-- raw_dcgm_hourly holds the staging rules for DCGM samples (filters, busy fraction; see the
-- staging model of the samples) applied per (source, load day) when each file is loaded, so a rebuild never
-- re-reads the 15 s samples; here the key normalisation (lower-case host, '' -> NULL) and the
-- multi-source check run on that small table. Only node-days fed by more than one source are read
-- sample by sample, to deduplicate; with none, that branch's join has an empty side and reads nothing.
with source as not materialized (

    -- the raw samples, for multi-source node-days only (the semi join below)
    -- load_day: the day whose feed directory the sample was loaded under (NULL for seeded tables)
    select *, day as load_day from {{ source('raw_dcgm_samples') }}
    where {{ dcgm_sample_filter(['DCGM_FI_PROF_GR_ENGINE_ACTIVE', 'DCGM_FI_DEV_GPU_UTIL']) }}

),

normalised as (

    select
        {{ dcgm_key('hour') }},
        metric,
        source,
        model_name,
        gpu_instance_profile,
        samples,
        -- samples loaded under another day than their own (next-day samples in today's directory)
        case when day <> cast(hour as date) then samples else 0 end as outside_samples,
        -- samples repeating a timestamp of the same GPU, instance, pod, metric and source
        samples - distinct_ts as duplicate_samples,
        busy_micro
    from {{ source('raw_dcgm_hourly') }}
    where hour >= {{ var('day_from') }}::timestamp
      and hour < {{ var('day_to') }}::timestamp + interval 1 day

),

per_source as (

    -- hours to days in one pass, still per source: a single-source node-day's rows are final here
    select
        {{ busy_key() }},
        source,
        min(model_name) as model_name,
        min(gpu_instance_profile) as gpu_instance_profile,
        sum(samples) as samples,
        sum(outside_samples) as outside_samples,
        sum(duplicate_samples) as duplicate_samples,
        sum(busy_micro) as busy_micro
    from normalised
    group by {{ busy_key() }}, source

),

multi_source as (

    -- node-days fed by more than one source (a live scrape and a history file overlap)
    select day, hostname
    from per_source
    group by day, hostname
    -- a NULL source counts as one more source (the raw table requires one; this keeps the rule exact)
    having count(distinct source) + max(case when source is null then 1 else 0 end) > 1

),

single_source as (

    select n.* exclude (source)
    from per_source as n
    anti join multi_source as g
        on g.day = n.day and g.hostname = n.hostname

),

deduped as (

    -- multi-source node-days only: one sample per GPU, metric and ts, the first by (source, source_line)
    select
        {{ busy_key() }},
        min(model_name) as model_name,
        min(gpu_instance_profile) as gpu_instance_profile,
        count(*) as samples,
        count(*) filter (where load_day <> day) as outside_samples,
        0 as duplicate_samples,
        sum(busy_micro) as busy_micro
    from (
        select
            {{ busy_key('s') }},
            s.model_name,
            s.gpu_instance_profile,
            s.load_day,
            round(least(case when s.metric = 'DCGM_FI_DEV_GPU_UTIL' then s.value / 100.0 else s.value end, 1.0)
                * 1000000.0) as busy_micro
        from (
            select
                {{ dcgm_key('ts') | indent(8) }},
                ts,
                metric,
                model_name,
                gpu_instance_profile,
                value,
                load_day,
                source,
                source_line
            from source
        ) as s
        {{ first_of_multi_source('s') }}
    )
    group by {{ busy_key() }}

),

final as (

    {%- for part in ['single_source', 'deduped'] %}
    {% if not loop.first %}union all
    {% endif -%}
    select
        {{ busy_key() }},
        model_name,
        gpu_instance_profile,
        cast(samples as bigint) as samples,
        cast(outside_samples as bigint) as outside_samples,
        cast(duplicate_samples as bigint) as duplicate_samples,
        -- micro-units back to an exact decimal(38, 6)
        cast(cast(busy_micro as bigint) as decimal(38, 0)) * cast(0.000001 as decimal(7, 6)) as busy_samples
    from {{ part | ident }}
    {%- endfor %}

)

select * from final
