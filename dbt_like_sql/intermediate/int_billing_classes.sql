-- Every billing piece of the day with what it pays for: a GPU node's price (gpu_node), a repeated
-- row (duplicate), a commitment's purchase (commitment_purchase: its fee, amortized into the usage
-- rows it covers, so it adds nothing to the effective cost) or unused part (unused_commitment: its
-- own chargeback line), tax, credit, a GPU instance no node explains (gpu_instance_without_node) or
-- shared cost (control plane, storage, network, support, rounding and other adjustments).
with billing as (

    select * from {{ ref('stg_focus_billing') }}
    where day between {{ var('day_from') }} and {{ var('day_to') }}

),

matched as (

    -- one row per piece (a scale set's row is split between its instances there: the first names it)
    select day, source, source_row, hostname, match_rule from {{ ref('int_billing_nodes') }}
    where day between {{ var('day_from') }} and {{ var('day_to') }}
    qualify row_number() over (partition by day, source, source_row order by hostname) = 1

),

gpu_types as (

    select * from {{ ref('gpu_instance_types') }}

),

looks_like_gpu as (

    select distinct b.day, b.source, b.source_row
    from billing as b
    inner join gpu_types as t
        on regexp_matches(
            lower(concat_ws(' ', b.charge_description, b.sku_id, b.resource_name, b.resource_type)), t.pattern)
    where b.charge_kind = 'usage'
      and (lower(coalesce(b.service_category, '')) = 'compute' or lower(coalesce(b.resource_type, '')) like '%instance%'
           or lower(coalesce(b.resource_type, '')) like '%virtual machine%')

),

final as (

    select
        b.day,
        b.source,
        b.source_row,
        b.resource_id,
        b.resource_key,
        b.resource_name,
        b.day_period_start,
        b.day_period_end,
        b.charge_description,
        b.currency,
        b.billed_cost,
        b.effective_cost,
        b.charge_category,
        b.charge_class,
        b.charge_kind,
        b.commitment_discount_id,
        m.hostname,
        m.match_rule,
        case
            when b.is_duplicate then 'duplicate'
            when b.charge_kind <> 'usage' then b.charge_kind
            when m.hostname is not null then 'gpu_node'
            when g.source is not null then 'gpu_instance_without_node'
            else 'shared'
        end as billing_class
    from billing as b
    left join matched as m on m.day = b.day and m.source = b.source and m.source_row = b.source_row
    left join looks_like_gpu as g on g.day = b.day and g.source = b.source and g.source_row = b.source_row

)

select * from final
