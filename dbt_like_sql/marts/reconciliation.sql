-- Billed cost vs what the models distributed or held back, per day and currency.
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
        coalesce(sum(unattributed_cost) filter (where price_source = 'billing'), 0) as unattributed_cost,
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

exceptions as (

    select
        day,
        currency,
        -- billed money held back: the unallocated cost of billed nodes without telemetry, GPU time
        -- on no admitted request on billed nodes, repeated rows, GPU instances without a node
        coalesce(sum(amount) filter (where treatment = 'unreconciled' and price_source = 'billing'), 0)
            as unreconciled_billed_cost,
        coalesce(sum(amount) filter (where treatment = 'unreconciled'), 0) as unreconciled_cost,
        count(*) as exceptions
    from {{ ref('reconciliation_exceptions') }}
    where day between {{ var('day_from') }} and {{ var('day_to') }} and currency is not null
    group by day, currency

),

charged as (

    select
        day,
        currency,
        sum(total_cost) as chargeback_total,
        coalesce(sum(total_cost) filter (where team <> '(unreconciled)'), 0) as charged_to_teams
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
        coalesce(e.unreconciled_billed_cost, 0) as unreconciled_billed_cost,
        coalesce(e.unreconciled_cost, 0) as unreconciled_cost,
        coalesce(n.price_book_cost, 0) as price_book_cost,
        coalesce(ch.chargeback_total, 0) as chargeback_total,
        coalesce(ch.charged_to_teams, 0) as charged_to_teams,
        coalesce(e.exceptions, 0) as exceptions,
        -- every billed dollar is allocated, idle, shared or held back on an exception
        coalesce(b.billed_cost, 0)
            - (coalesce(n.allocated_cost, 0) + coalesce(n.idle_cost, 0) + coalesce(s.shared_cost, 0)
               + coalesce(e.unreconciled_billed_cost, 0))
            as difference
    from keys as k
    left join billing as b on b.day = k.day and b.currency = k.currency
    left join nodes as n on n.day = k.day and n.currency = k.currency
    left join shared as s on s.day = k.day and s.currency = k.currency
    left join charged as ch on ch.day = k.day and ch.currency = k.currency
    left join exceptions as e on e.day = k.day and e.currency = k.currency

)

select * from final
