-- Allocated and used GPU-hours per request, day and flavor; failed retries included.
with pods as (

    select * from {{ ref('int_pod_gpu_hours') }}
    where day between {{ var('day_from') }} and {{ var('day_to') }}

),

final as (

    select
        day,
        request_id,
        flavor_name,
        count(distinct attempt) as attempts,
        count(distinct attempt) filter (where failed) as failed_attempts,
        sum(allocated_gpu_hours) as allocated_gpu_hours,
        sum(used_gpu_hours) as used_gpu_hours,
        sum(allocated_gpu_hours) filter (where failed) as failed_gpu_hours
    from pods
    group by day, request_id, flavor_name

)

select * from final
