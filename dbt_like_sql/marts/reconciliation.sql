-- Billed cost vs what the models distributed, per day and currency.
with billing as (

    select day, currency, sum(billed_cost) as billed_cost
    from {{ ref('stg_focus_billing') }}
    where day between {{ var('day_from') }} and {{ var('day_to') }}
    group by day, currency

),

nodes as (

    select
        day,
        currency,
        coalesce(sum(node_cost) filter (where price_source = 'billing'), 0) as billed_node_cost,
        coalesce(sum(allocated_cost) filter (where price_source = 'billing'), 0) as allocated_cost,
        coalesce(sum(idle_cost) filter (where price_source = 'billing'), 0) as idle_cost,
        coalesce(sum(node_cost) filter (where price_source = 'price_book'), 0) as price_book_cost
    from {{ ref('int_idle_capacity') }}
    where day between {{ var('day_from') }} and {{ var('day_to') }}
    group by day, currency

),

shared as (

    select day, currency, sum(shared_cost) as shared_cost
    from {{ ref('int_shared_cost') }}
    where day between {{ var('day_from') }} and {{ var('day_to') }}
    group by day, currency

),

charged as (

    select day, currency, sum(total_cost) as chargeback_total
    from {{ ref('chargeback') }}
    where day between {{ var('day_from') }} and {{ var('day_to') }}
    group by day, currency

),

keys as (

    select day, currency from billing
    union
    select day, currency from nodes
    union
    select day, currency from charged

),

final as (

    select
        k.day,
        k.currency,
        coalesce(b.billed_cost, 0) as billed_cost,
        coalesce(n.billed_node_cost, 0) as billed_node_cost,
        coalesce(n.allocated_cost, 0) as allocated_cost,
        coalesce(n.idle_cost, 0) as idle_cost,
        coalesce(s.shared_cost, 0) as shared_cost,
        coalesce(n.price_book_cost, 0) as price_book_cost,
        coalesce(ch.chargeback_total, 0) as chargeback_total,
        coalesce(b.billed_cost, 0)
            - (coalesce(n.allocated_cost, 0) + coalesce(n.idle_cost, 0) + coalesce(s.shared_cost, 0))
            as difference
    from keys as k
    left join billing as b on b.day = k.day and b.currency = k.currency
    left join nodes as n on n.day = k.day and n.currency = k.currency
    left join shared as s on s.day = k.day and s.currency = k.currency
    left join charged as ch on ch.day = k.day and ch.currency = k.currency

)

select * from final
