-- Fully loaded platform cost per tenant (team) and day, from chargeback.
with chargeback as (

    select * from {{ ref('chargeback') }}
    where day between {{ var('day_from') }} and {{ var('day_to') }}

),

final as (

    select
        day,
        team,
        cost_center,
        currency,
        sum(allocated_gpu_hours) as allocated_gpu_hours,
        sum(used_gpu_hours) as used_gpu_hours,
        sum(used_gpu_hours) / nullif(sum(allocated_gpu_hours), 0) as gpu_utilization,
        sum(allocated_cost) as allocated_cost,
        coalesce(sum(allocated_gpu_hours) filter (where bypass), 0.0) as bypass_gpu_hours,
        coalesce(sum(allocated_cost) filter (where bypass), 0) as bypass_cost,
        sum(cpu_cost) as cpu_cost,
        sum(storage_cost) as storage_cost,
        sum(idle_cost) as idle_cost,
        sum(shared_cost) as shared_cost,
        sum(tax_cost) as tax_cost,
        sum(credit_cost) as credit_cost,
        sum(total_cost) as total_cost,
        case when sum(shared_cost) <= 0
            then string_agg(distinct shared_cost_reason, '; ' order by shared_cost_reason) end as shared_cost_reason
    from chargeback
    group by day, team, cost_center, currency

)

select * from final
