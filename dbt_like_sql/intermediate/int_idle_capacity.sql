-- Capacity, allocation and idle per node and day. The node's cost = allocated (pods of admitted
-- requests) + unattributed (GPU time on no admitted request) + idle, exactly; for a billed node
-- with no telemetry of the day the part nobody was allocated is unreconciled, not idle: nothing
-- shows whether it sat idle or ran work nobody recorded.
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

unattributed as (

    select day, hostname, sum(gpu_hours) as gpu_hours, sum(cost) as cost
    from {{ ref('int_unattributed_gpu_hours') }}
    where day between {{ var('day_from') }} and {{ var('day_to') }}
    group by day, hostname

),

joined as (

    select
        p.*,
        coalesce(a.allocated_gpu_hours, 0.0) as allocated_gpu_hours,
        coalesce(a.used_gpu_hours, 0.0) as used_gpu_hours,
        coalesce(a.allocated_cost, 0) as allocated_cost,
        coalesce(u.gpu_hours, 0.0) as unattributed_gpu_hours,
        coalesce(u.cost, 0) as unattributed_cost,
        p.node_cost - coalesce(a.allocated_cost, 0) - coalesce(u.cost, 0) as remainder
    from prices as p
    left join allocated as a on a.day = p.day and a.hostname = p.hostname
    left join unattributed as u on u.day = p.day and u.hostname = p.hostname

),

final as (

    select
        day,
        hostname,
        gpus,
        capacity_gpu_hours,
        allocated_gpu_hours,
        used_gpu_hours,
        unattributed_gpu_hours,
        greatest(capacity_gpu_hours - allocated_gpu_hours - unattributed_gpu_hours, 0.0) as idle_gpu_hours,
        currency,
        price_source,
        has_telemetry,
        node_cost,
        billed_node_cost,
        allocated_cost,
        unattributed_cost,
        -- exact in decimals: allocated + unattributed + idle + unreconciled = node cost
        case when price_source = 'billing' and not has_telemetry then cast(0 as decimal(38, 6))
             else remainder end as idle_cost,
        case when price_source = 'billing' and not has_telemetry then remainder
             else cast(0 as decimal(38, 6)) end as unreconciled_cost
    from joined

)

select * from final
