-- Billing pieces of GPU nodes: a FOCUS row belongs to a node when its provider identity matches
-- the node's providerID (AWS instance id / ARN, Azure VM id, GCP self link / id, OCI OCID), else
-- when its ResourceId, else its ResourceName, equals the node name. The best rule wins; a row
-- matching two nodes by the same rule goes to the first name. An Azure row billed per virtual
-- machine scale set (ResourceId `.../virtualMachineScaleSets/S`, how Azure bills uniform scale
-- sets) when no better rule matches belongs to every node of the day that is an instance of S
-- (providerID `.../virtualMachineScaleSets/S/virtualMachines/N`), split evenly between them (the
-- last by name takes the rounding remainder, so the pieces add up to the row). Only usage rows price a node: a
-- commitment's purchase and unused part, tax and credits have their own lines (int_billing_classes)
-- even when they name the instance.
with billing as (

    select * from {{ ref('stg_focus_billing') }}
    where day between {{ var('day_from') }} and {{ var('day_to') }} and charge_kind = 'usage'

),

nodes as (

    select day, hostname, provider_key, alt_provider_key from {{ ref('int_gpu_nodes') }}
    where day between {{ var('day_from') }} and {{ var('day_to') }}

),

candidates as (

    select b.day, b.source, b.source_row, n.hostname, 1 as rule_rank, 'provider_id' as match_rule
    from billing as b
    inner join nodes as n on n.day = b.day and b.resource_key is not null and n.provider_key = b.resource_key
    union all
    select b.day, b.source, b.source_row, n.hostname, 1, 'provider_id'
    from billing as b
    inner join nodes as n on n.day = b.day and b.resource_key is not null and n.alt_provider_key = b.resource_key
    union all
    select b.day, b.source, b.source_row, n.hostname, 2, 'resource_id'
    from billing as b
    inner join nodes as n on n.day = b.day and n.hostname = b.resource_id
    union all
    select b.day, b.source, b.source_row, n.hostname, 3, 'resource_name'
    from billing as b
    inner join nodes as n on n.day = b.day and n.hostname = lower(b.resource_name)
    union all
    select b.day, b.source, b.source_row, n.hostname, 4, 'scale_set'
    from billing as b
    inner join nodes as n on n.day = b.day and b.resource_key is not null
        and contains(b.resource_key, '/virtualmachinescalesets/') and not contains(b.resource_key, '/virtualmachines/')
        and starts_with(n.provider_key, b.resource_key || '/virtualmachines/')

),

ranked as (

    select
        *,
        min(rule_rank) over (partition by day, source, source_row) as best_rank,
        row_number() over (partition by day, source, source_row order by rule_rank, hostname) as rn,
        count(*) filter (where rule_rank = 4) over (partition by day, source, source_row) as set_nodes,
        row_number() over (partition by day, source, source_row, rule_rank order by hostname) as set_rn
    from candidates

),

best as (

    select * from ranked
    where (best_rank < 4 and rn = 1) or (best_rank = 4 and rule_rank = 4)

),

final as (

    select
        b.day,
        m.hostname,
        m.match_rule,
        b.source,
        b.source_row,
        b.resource_id,
        b.resource_name,
        b.day_period_start,
        b.day_period_end,
        case when m.match_rule <> 'scale_set' then b.billed_cost
             when m.set_rn < m.set_nodes then cast(round(b.billed_cost / m.set_nodes, 6) as decimal(18, 6))
             else cast(b.billed_cost - round(b.billed_cost / m.set_nodes, 6) * (m.set_nodes - 1) as decimal(18, 6))
        end as billed_cost,
        case when m.match_rule <> 'scale_set' then b.effective_cost
             when m.set_rn < m.set_nodes then cast(round(b.effective_cost / m.set_nodes, 6) as decimal(18, 6))
             else cast(b.effective_cost - round(b.effective_cost / m.set_nodes, 6) * (m.set_nodes - 1) as decimal(18, 6))
        end as effective_cost,
        b.pricing_category,
        b.commitment_discount_id,
        b.currency,
        -- hours the row says its instance ran (ConsumedQuantity in hours; not for a scale set's row,
        -- which counts every instance of the set)
        case when m.match_rule <> 'scale_set' and lower(b.consumed_unit) in ('hour', 'hours', 'hr', 'hrs')
             then b.consumed_quantity end as consumed_hours,
        b.is_duplicate
    from billing as b
    inner join best as m on m.day = b.day and m.source = b.source and m.source_row = b.source_row

)

select * from final
