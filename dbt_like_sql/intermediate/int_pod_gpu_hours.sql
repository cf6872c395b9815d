-- Per pod and day: allocated GPU-hours (pod window x GPUs), used GPU-hours (busy samples), cost.
with days as (

    select * from {{ ref('int_build_days') }}

),

pods as (

    select * from {{ ref('int_pods') }}

),

requests as (

    select request_id, gpu_count, gpu_resource from {{ ref('stg_requests') }}

),

windows as (

    -- a running pod (ended_at null) is counted to the end of the day
    select
        d.day,
        p.* exclude (gpu_resource, gpu_share),
        coalesce(p.gpu_resource, r.gpu_resource) as gpu_resource,
        -- units of the resource held: GPUs, MIG slices or shared replicas
        coalesce(p.assigned_gpus, r.gpu_count) as gpu_units,
        -- the share of one GPU a unit is priced at (see stg_pod_requests)
        coalesce(
            p.gpu_share,
            case when coalesce(p.gpu_resource, r.gpu_resource) like 'nvidia.com/mig-%'
                 then try_cast(regexp_extract(coalesce(p.gpu_resource, r.gpu_resource), 'mig-([1-7])g\.', 1)
                               as integer) / 7.0 end,
            1.0
        ) as gpu_share,
        greatest(p.started_at, d.day_start) as window_start,
        least(coalesce(p.ended_at, d.day_end), d.day_end) as window_end
    from pods as p
    inner join requests as r on r.request_id = p.request_id
    inner join days as d
        on p.started_at < d.day_end and coalesce(p.ended_at, d.day_end) > d.day_start

),

gpu_busy as (

    select * from {{ ref('int_gpu_busy') }}
    where day between {{ var('day_from') }} and {{ var('day_to') }}

),

preferred as (

    -- engine-active wins for a GPU that reported it at all that day; else GPU_UTIL/100
    select
        *,
        bool_or(metric = 'DCGM_FI_PROF_GR_ENGINE_ACTIVE')
            over (partition by day, hostname, gpu, gpu_instance_id) as has_engine_active
    from gpu_busy

),

busy as (

    -- each sample stands for one collect interval (15 s): busy hours of the devices the pod holds
    -- (GPUs or MIG instances; DCGM's per-instance busy is relative to the instance) = sum(busy) x interval
    select
        day,
        namespace,
        pod,
        cast(sum(busy_samples) as double) * {{ var('sample_interval_s') }} / 3600.0 as used_device_hours
    from preferred
    where pod is not null
      and metric = case when has_engine_active then 'DCGM_FI_PROF_GR_ENGINE_ACTIVE' else 'DCGM_FI_DEV_GPU_UTIL' end
    group by day, namespace, pod

),

prices as (

    select * from {{ ref('int_node_hour_prices') }}
    where day between {{ var('day_from') }} and {{ var('day_to') }}

),

hours as (

    select
        w.day,
        w.namespace,
        w.pod,
        w.request_id,
        w.attempt,
        w.flavor_name,
        w.hostname,
        w.exit_status,
        w.failed,
        -- GPUs held, counted as whole-GPU equivalents: units x share (2 x 1g.10gb = 2/7 of a GPU)
        w.gpu_units * w.gpu_share as pod_gpus,
        w.gpu_resource,
        w.gpu_units,
        w.gpu_share,
        epoch(w.window_end - w.window_start) / 3600.0 * w.gpu_units * w.gpu_share as allocated_gpu_hours,
        -- a slice's or replica's busy time in GPU-hours: device busy x its share of the GPU (a
        -- time-sliced GPU reports device-level busy to every pod on it: each pays its share)
        coalesce(b.used_device_hours, 0.0) * w.gpu_share as used_gpu_hours
    from windows as w
    left join busy as b on b.day = w.day and b.namespace = w.namespace and b.pod = w.pod

),

final as (

    select
        h.*,
        p.currency,
        p.price_source,
        -- cost = hours x node_cost / capacity, rounded once to 1e-6; idle takes the remainder
        cast(round(h.allocated_gpu_hours * cast(p.node_cost as double) / p.capacity_gpu_hours, 6)
            as decimal(18, 6)) as allocated_cost
    from hours as h
    left join prices as p on p.day = h.day and p.hostname = h.hostname

)

select * from final
