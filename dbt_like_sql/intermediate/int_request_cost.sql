-- Lifetime GPU cost of each request: every day, every attempt (failed retries included), priced
-- pods only: GPU time whose node has no price (currency null) has no cost to add up (nor GPU-hours
-- to count here); it is listed per request in unpriced_requests (and per pod or node in
-- reconciliation_exceptions). The same pod-day costs as fct_gpu_cost_by_request, summed over days.
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

final as (

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

)

select * from final
