-- Billed cost that is not a GPU node's: control plane, storage, network, support, tax.
with billing as (

    select * from {{ ref('stg_focus_billing') }}
    where day between {{ var('day_from') }} and {{ var('day_to') }}

),

nodes as (

    select day, hostname from {{ ref('int_node_hour_prices') }}
    where day between {{ var('day_from') }} and {{ var('day_to') }} and price_source = 'billing'

),

final as (

    select
        b.day,
        b.currency,
        sum(b.billed_cost) as shared_cost,
        count(*) as billing_rows
    from billing as b
    anti join nodes as n on n.day = b.day and n.hostname = b.resource_id
    group by b.day, b.currency

)

select * from final
