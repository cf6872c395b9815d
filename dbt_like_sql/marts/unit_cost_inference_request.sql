-- Cost per 1,000 inference requests per service and day: the replicas' GPU cost of the day
-- (int_service_gpu_time, idle replicas included: the service held them) over the requests it
-- answered that day (stg_service_requests). The idle share is shown beside it.
with gpu as (

    select * from {{ ref('int_service_gpu_time') }}
    where day between {{ var('day_from') }} and {{ var('day_to') }}

),

counted as (

    select day, service, sum(requests) as requests, count(*) as request_points
    from {{ ref('stg_service_requests') }}
    where day between {{ var('day_from') }} and {{ var('day_to') }}
    group by day, service

),

joined as (

    select
        coalesce(g.day, c.day) as day,
        coalesce(g.service, c.service) as service,
        g.team,
        g.lane,
        g.currency,
        g.request_ids,
        coalesce(g.replica_pods, 0) as replica_pods,
        coalesce(g.replica_hours, 0) as replica_hours,
        coalesce(g.allocated_gpu_hours, 0) as allocated_gpu_hours,
        coalesce(g.used_gpu_hours, 0) as used_gpu_hours,
        coalesce(g.idle_gpu_hours, 0) as idle_gpu_hours,
        g.allocated_cost,
        g.idle_cost,
        coalesce(c.requests, 0) as requests,
        coalesce(c.request_points, 0) as request_points,
        g.service is not null as has_gpu_time
    from gpu as g
    full outer join counted as c on c.day = g.day and c.service = g.service

),

final as (

    select
        * exclude (has_gpu_time),
        cast(round(cast(allocated_cost as double) / nullif(requests, 0) * 1000, 6) as decimal(18, 6))
            as cost_per_1k_requests,
        cast(round(cast(idle_cost as double) / nullif(requests, 0) * 1000, 6) as decimal(18, 6))
            as idle_cost_per_1k_requests,
        -- why there is no cost per 1,000 requests (NULL when there is one)
        case
            when not has_gpu_time
                then 'requests counted but no replica GPU time recorded for this service on the day '
                     || '(no admitted service request of this name ran)'
            when currency is null then 'the replicas ran on a node without a price (see unpriced_requests)'
            when requests = 0 then 'no requests counted for this service on the day (no request-count points loaded, '
                                   || 'or the service answered none)'
        end as reason
    from joined

)

select * from final
