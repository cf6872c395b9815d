-- Lifetime GPU cost of each request: every day, every attempt (failed retries included), priced
-- pods only: GPU time whose node has no price (currency null) has no cost to add up (nor GPU-hours
-- to count here); it is listed per request in unpriced_requests (and per pod or node in
-- reconciliation_exceptions). The same pod-day costs as fct_gpu_cost_by_request, summed over days,
-- plus the CPU node time of the request's pods (int_cpu_node_cost, by their CPU and memory
-- requests) and the volumes they mounted (int_volume_cost, by mount time): cost = gpu_cost +
-- cpu_cost + storage_cost, all measured (nothing distributed).
with priced as (

    select * from {{ ref('int_pod_gpu_hours') }}
    where currency is not null

),

pods as (

    select
        request_id,
        count(distinct attempt) as attempts,
        count(distinct attempt) filter (where failed) as failed_attempts
    from {{ ref('int_pods') }}
    group by request_id

),

gpu as (

    select
        d.request_id,
        d.currency,
        min(d.day) as first_day,
        max(d.day) as last_day,
        any_value(p.attempts) as attempts,
        any_value(p.failed_attempts) as failed_attempts,
        sum(d.allocated_gpu_hours) as allocated_gpu_hours,
        sum(d.used_gpu_hours) as used_gpu_hours,
        sum(d.allocated_cost) as cost,
        coalesce(sum(d.allocated_cost) filter (where d.failed), 0) as failed_attempt_cost
    from priced as d
    left join pods as p on p.request_id = d.request_id
    group by d.request_id, d.currency

),

by_use as (

    select
        request_id, currency, min(day) as first_day, max(day) as last_day,
        coalesce(sum(cost) filter (where part = 'cpu'), 0) as cpu_cost,
        coalesce(sum(cost) filter (where part = 'storage'), 0) as storage_cost
    from (
        select request_id, currency, day, cost, 'cpu' as part from {{ ref('int_cpu_node_cost') }}
        where owner_rule = 'request'
        union all
        select request_id, currency, day, cost, 'storage' from {{ ref('int_volume_cost') }}
        where owner_rule = 'request'
    )
    group by request_id, currency

),

final as (

    select
        coalesce(g.request_id, c.request_id) as request_id,
        coalesce(g.currency, c.currency) as currency,
        least(g.first_day, c.first_day) as first_day,
        greatest(g.last_day, c.last_day) as last_day,
        g.attempts,
        g.failed_attempts,
        coalesce(g.allocated_gpu_hours, 0.0) as allocated_gpu_hours,
        coalesce(g.used_gpu_hours, 0.0) as used_gpu_hours,
        coalesce(g.cost, 0) as gpu_cost,
        coalesce(c.cpu_cost, 0) as cpu_cost,
        coalesce(c.storage_cost, 0) as storage_cost,
        coalesce(g.cost, 0) + coalesce(c.cpu_cost, 0) + coalesce(c.storage_cost, 0) as cost,
        coalesce(g.failed_attempt_cost, 0) as failed_attempt_cost
    from gpu as g
    full outer join by_use as c on c.request_id = g.request_id and c.currency = g.currency

)

select * from final
