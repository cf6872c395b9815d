-- Billing pieces of GPU nodes: a FOCUS row belongs to a node when its provider identity matches
-- the identity of an instance the node name stood for while the row's period ran (AWS instance id /
-- ARN, Azure VM id, GCP self link / id, OCI OCID; stg_nodes.instances: a node replaced under the
-- same name has two instances that day, and each instance's rows price the node), else when its
-- ResourceId, else its ResourceName, equals the node name. The best rule wins; a row matching two
-- nodes by the same rule goes to the first name. An Azure row billed per virtual machine scale set
-- (ResourceId `.../virtualMachineScaleSets/S`) belongs to the instance it names when it names one:
-- x_SkuDetails' VMName, else ResourceName, `S_N` is instance N (providerID
-- `.../virtualMachineScaleSets/S/virtualMachines/N`), rule scale_set_instance; a VMName equal to a
-- node name is that node (resource_name). Only a scale set's row naming no instance belongs to every
-- node of the day that is an instance of S, split evenly between them (the last by name takes the
-- rounding remainder, so the pieces add up to the row). Only usage rows price a node: a
-- commitment's purchase and unused part, tax and credits have their own lines (int_billing_classes)
-- even when they name the instance.
-- A disk named after its node (a GCP boot disk carries its instance's name: ResourceName = node
-- name) is the node's cost by the resource_name rule: it exists for the node and goes with it. A
-- root volume whose bill names no node (AWS's vol-... without a name) stays shared.
with billing as (

    select * from {{ ref('stg_focus_billing') }}
    where day between {{ var('day_from') }} and {{ var('day_to') }} and charge_kind = 'usage'

),

nodes as (

    select day, hostname, provider_key, alt_provider_key, instances from {{ ref('int_gpu_nodes') }}
    where day between {{ var('day_from') }} and {{ var('day_to') }}

),

instances as (

    -- each instance of each node-day with the time the name stood for it
    select n.day, n.hostname, i.provider_key, i.alt_provider_key, i.valid_from, i.valid_to
    from nodes as n, unnest(n.instances) as u(i)

),

named_vms as (

    -- the instance a scale set's row names: x_SkuDetails' VMName (Azure's cost details), else
    -- ResourceName; `S_N` with S the scale set's name is its instance N
    select
        b.day, b.source, b.source_row, b.resource_key,
        b.vm_name,
        case when b.vm_name = regexp_extract(b.resource_key, '/virtualmachinescalesets/([^/]+)$', 1)
                 || '_' || regexp_extract(b.vm_name, '_([0-9]+)$', 1)
             then b.resource_key || '/virtualmachines/' || regexp_extract(b.vm_name, '_([0-9]+)$', 1)
        end as vm_key
    from billing as b
    where b.vm_name is not null and b.resource_key is not null
      and regexp_matches(b.resource_key, '/virtualmachinescalesets/[^/]+$')

),

candidates as (

    -- an instance's rows while the name stood for it
    -- (two equi-joins, not one join on an OR, so each is a hash join)
    select b.day, b.source, b.source_row, i.hostname, 1 as rule_rank, 'provider_id' as match_rule
    from billing as b
    inner join instances as i on i.day = b.day and i.provider_key = b.resource_key
        and b.day_period_start < i.valid_to and b.day_period_end >= i.valid_from
    union all
    select b.day, b.source, b.source_row, i.hostname, 1, 'provider_id'
    from billing as b
    inner join instances as i on i.day = b.day and i.alt_provider_key = b.resource_key
        and b.day_period_start < i.valid_to and b.day_period_end >= i.valid_from
    union all
    select v.day, v.source, v.source_row, i.hostname, 1, 'scale_set_instance'
    from named_vms as v
    inner join billing as b on b.day = v.day and b.source = v.source and b.source_row = v.source_row
    inner join instances as i on i.day = v.day and i.provider_key = v.vm_key
        and b.day_period_start < i.valid_to and b.day_period_end >= i.valid_from
    union all
    select v.day, v.source, v.source_row, n.hostname, 3, 'resource_name'
    from named_vms as v
    inner join nodes as n on n.day = v.day and n.hostname = v.vm_name
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
    -- a row naming its instance is that instance's alone, never split over the set
    anti join named_vms as v on v.day = b.day and v.source = b.source and v.source_row = b.source_row
        and v.vm_key is not null

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
        b.resource_key,
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
        b.sku_id,
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
