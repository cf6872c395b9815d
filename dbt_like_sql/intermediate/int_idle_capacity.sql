-- Capacity, allocation and idle per node and day; idle cost is the node's cost nobody was allocated.
with prices as (

    select * from {{ ref('int_node_hour_prices') }}
    where day between {{ var('day_from') }} and {{ var('day_to') }}

),

allocated as (

    select
        day,
        hostname,
        sum(allocated_gpu_hours) as allocated_gpu_hours,
        sum(used_gpu_hours) as used_gpu_hours,
        sum(allocated_cost) as allocated_cost
    from {{ ref('int_pod_gpu_hours') }}
    where day between {{ var('day_from') }} and {{ var('day_to') }}
    group by day, hostname

),

final as (

    select
        p.day,
        p.hostname,
        p.gpus,
        p.capacity_gpu_hours,
        coalesce(a.allocated_gpu_hours, 0.0) as allocated_gpu_hours,
        coalesce(a.used_gpu_hours, 0.0) as used_gpu_hours,
        greatest(p.capacity_gpu_hours - coalesce(a.allocated_gpu_hours, 0.0), 0.0) as idle_gpu_hours,
        p.currency,
        p.price_source,
        p.node_cost,
        coalesce(a.allocated_cost, 0) as allocated_cost,
        -- exact in decimals: allocated + idle = node cost to the micro-unit
        p.node_cost - coalesce(a.allocated_cost, 0) as idle_cost
    from prices as p
    left join allocated as a on a.day = p.day and a.hostname = p.hostname

)

select * from final
