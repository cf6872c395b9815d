-- Direct (allocated) GPU cost per request, day and flavor, with who pays for it.
with hours as (

    select * from {{ ref('int_gpu_hours_by_request') }}
    where day between {{ var('day_from') }} and {{ var('day_to') }}

),

cost as (

    select
        day,
        request_id,
        flavor_name,
        min(currency) as currency,
        count(distinct currency) as currencies,
        sum(allocated_cost) as allocated_cost,
        coalesce(sum(allocated_cost) filter (where failed), 0) as failed_attempt_cost
    from {{ ref('int_pod_gpu_hours') }}
    where day between {{ var('day_from') }} and {{ var('day_to') }}
    group by day, request_id, flavor_name

),

requests as (

    select * from {{ ref('stg_requests') }}

),

final as (

    select
        h.day,
        h.request_id,
        r.team,
        r.cost_center,
        r.site,
        r.lane,
        r.workload,
        h.flavor_name,
        c.currency,
        c.currencies,
        h.attempts,
        h.failed_attempts,
        h.allocated_gpu_hours,
        h.used_gpu_hours,
        h.used_gpu_hours / nullif(h.allocated_gpu_hours, 0) as gpu_utilization,
        c.allocated_cost,
        c.failed_attempt_cost
    from hours as h
    inner join requests as r on r.request_id = h.request_id
    left join cost as c on c.day = h.day and c.request_id = h.request_id and c.flavor_name is not distinct from h.flavor_name

)

select * from final
