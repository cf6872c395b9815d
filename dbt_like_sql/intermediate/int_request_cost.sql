-- Lifetime GPU cost of each request: every day, every attempt (failed retries included).
with daily as (

    select * from {{ ref('fct_gpu_cost_by_request') }}

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
        sum(d.failed_attempt_cost) as failed_attempt_cost
    from daily as d
    left join pods as p on p.request_id = d.request_id
    group by d.request_id, d.currency

)

select * from final
