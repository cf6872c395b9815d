-- Billing pieces of GPU nodes: a FOCUS row belongs to a node when its provider identity matches
-- the node's providerID (AWS instance id / ARN, Azure VM id, GCP self link / id, OCI OCID), else
-- when its ResourceId, else its ResourceName, equals the node name. The best rule wins; a row
-- matching two nodes by the same rule goes to the first name. Only usage rows price a node: a
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

),

best as (

    select *
    from candidates
    qualify row_number() over (partition by day, source, source_row order by rule_rank, hostname) = 1

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
        b.billed_cost,
        b.effective_cost,
        b.pricing_category,
        b.commitment_discount_id,
        b.currency,
        b.is_duplicate
    from billing as b
    inner join best as m on m.day = b.day and m.source = b.source and m.source_row = b.source_row

)

select * from final
