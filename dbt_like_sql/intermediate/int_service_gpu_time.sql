-- GPU time and cost of each service's replicas per day: the replica pods of its service requests
-- (int_pod_gpu_hours: the ledger's replica windows, or the Deployment's pods on a cluster), priced
-- at their node's GPU-hour price like every other pod. Idle: GPU-hours the replicas held while
-- their GPUs were not busy (DCGM), and that share of their cost.
with requests as (

    select request_id, service_name, team, lane
    from {{ ref('stg_requests') }}
    where workload = 'service' and service_name is not null

),

pods as (

    select * from {{ ref('int_pod_gpu_hours') }}
    where day between {{ var('day_from') }} and {{ var('day_to') }}

),

replicas as (

    select
        p.day,
        r.service_name as service,
        r.team,
        r.lane,
        p.request_id,
        p.pod,
        p.currency,
        p.pod_gpus,
        -- hours the replica ran on the day: its GPU-hours over the GPUs it holds
        p.allocated_gpu_hours / nullif(p.pod_gpus, 0) as replica_hours,
        p.allocated_gpu_hours,
        p.used_gpu_hours,
        greatest(p.allocated_gpu_hours - p.used_gpu_hours, 0) as idle_gpu_hours,
        p.allocated_cost
    from pods as p
    inner join requests as r on r.request_id = p.request_id

),

final as (

    select
        day,
        service,
        currency,
        min(team) as team,
        min(lane) as lane,
        list(distinct request_id order by request_id) as request_ids,
        count(*) as replica_pods,
        sum(replica_hours) as replica_hours,
        sum(allocated_gpu_hours) as allocated_gpu_hours,
        sum(used_gpu_hours) as used_gpu_hours,
        sum(idle_gpu_hours) as idle_gpu_hours,
        cast(sum(allocated_cost) as decimal(18, 6)) as allocated_cost,
        -- each replica's cost x its idle share, rounded once to 1e-6
        cast(round(sum(cast(allocated_cost as double) * idle_gpu_hours / nullif(allocated_gpu_hours, 0)), 6)
            as decimal(18, 6)) as idle_cost
    from replicas
    group by day, service, currency

)

select * from final
