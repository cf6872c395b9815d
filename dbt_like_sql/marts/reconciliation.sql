-- Billed and effective (amortized) cost vs what the models distributed or held back, per day and
-- currency. Allocation is at EffectiveCost, so the effective cost is what adds up to the parts; the
-- billed cost differs from it by the commitments' purchase fees against the amortized cost of the
-- usage they covered (billed_minus_effective).
with billing as (

    {% call day_currency_totals('stg_focus_billing') %}
        sum(billed_cost) as billed_cost_rounded,
        sum(effective_cost) as effective_cost_rounded,
        -- exact sums (no per-row rounding before aggregation); round once, for display
        sum(billed_cost_exact) as billed_cost,
        sum(effective_cost_exact) as effective_cost,
        -- the raw table's own amounts for the same money: the rows within the day as loaded, plus
        -- the staged pieces of rows spanning days (their pieces add up to the row, tested above)
        sum(billed_cost_exact) filter (where day_share < 1) as spanning_billed_cost,
        count(*) filter (where charge_class ilike 'correction') as correction_rows
    {% endcall %}

),

raw_billing as (

    select
        cast(ChargePeriodStart as date) as day,
        upper(BillingCurrency) as currency,
        sum(BilledCost) as raw_billed_cost
    from {{ source('raw_focus_billing') }}
    where ChargePeriodStart >= {{ var('day_from') }}::timestamp
      and ChargePeriodStart < {{ var('day_to') }}::timestamp + interval 1 day
      and ChargePeriodEnd <= cast(cast(ChargePeriodStart as date) as timestamp) + interval 1 day
    group by all

),

quarantined as (

    -- FOCUS rows the loader quarantined under the day (a NULL in a non-nullable column, an
    -- unreadable cell, a foreign currency, an empty charge period): what their own cells say
    -- they cost, in no total above and counted in difference, so money never leaves unseen.
    -- Duplicates (a row equal to an accepted one) are not missing money and stay out.
    select
        day,
        upper(BillingCurrency) as currency,
        count(*) as quarantined_rows,
        coalesce(sum(BilledCost), 0) as quarantined_billed_cost,
        coalesce(sum(EffectiveCost), 0) as quarantined_effective_cost
    from {{ source('raw_focus_quarantine') }}
    where day between {{ var('day_from') }} and {{ var('day_to') }}
      and regexp_matches(upper(BillingCurrency), '^[A-Z]{3}$')
      and reason not like '%: duplicate of %'
    group by day, upper(BillingCurrency)

),

nodes as (

    {% call day_currency_totals('int_idle_capacity') %}
        coalesce(sum(billed_node_cost) filter (where price_source = 'billing'), 0) as billed_node_cost,
        coalesce(sum(node_cost) filter (where price_source = 'billing'), 0) as effective_node_cost,
        coalesce(sum(allocated_cost) filter (where price_source = 'billing'), 0) as allocated_cost,
        coalesce(sum(idle_cost) filter (where price_source = 'billing'), 0) as idle_cost,
        coalesce(sum(unattributed_cost) filter (where price_source = 'billing'), 0) as unattributed_cost,
        coalesce(sum(node_cost) filter (where price_source = 'price_book'), 0) as price_book_cost
    {% endcall %}

),

shared as (

    {% call day_currency_totals('int_shared_cost') %}
        sum(shared_cost) as shared_cost,
        sum(cpu_node_allocated_cost) as cpu_node_cost,
        sum(storage_allocated_cost) as storage_cost,
        sum(unmounted_volume_cost) as unmounted_volume_cost,
        sum(tax_cost) as tax_cost,
        sum(credit_cost) as credit_cost,
        sum(unused_commitment_cost) as unused_commitment_cost,
        sum(commitment_purchase_billed) as commitment_purchase_billed
    {% endcall %}

),

bypass as (

    -- GPU time on no admitted request in a team's namespace, on billed nodes: charged to the team
    {% call day_currency_totals('int_unattributed_gpu_hours', equal={'bypass': true, 'price_source': 'billing'}) %}
        sum(cost) as bypass_cost
    {% endcall %}

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

    {% call day_currency_totals('chargeback') %}
        sum(total_cost) as chargeback_total,
        coalesce(sum(total_cost) filter (where team not in ('(unreconciled)', '(unused commitment)')), 0)
            as charged_to_teams
    {% endcall %}

),

keys as (

    select day, currency from billing
    union
    select day, currency from nodes
    union
    select day, currency from charged
    union
    select day, currency from quarantined

),

final as (

    select
        k.day,
        k.currency,
        coalesce(b.billed_cost, 0) as billed_cost,
        coalesce(b.effective_cost, 0) as effective_cost,
        coalesce(rb.raw_billed_cost, 0) + coalesce(b.spanning_billed_cost, 0) as raw_billed_cost,
        -- money below the 1e-6 the pricing models round each piece to: in no part below, counted in
        -- difference (100,000 rows of 0.0000004: 0.04)
        coalesce(b.effective_cost, 0) - coalesce(b.effective_cost_rounded, 0) as rounding_effective_cost,
        coalesce(b.billed_cost, 0) - coalesce(b.effective_cost, 0) as billed_minus_effective,
        coalesce(s.commitment_purchase_billed, 0) as commitment_purchase_billed,
        coalesce(b.correction_rows, 0) as correction_rows,
        coalesce(n.billed_node_cost, 0) as billed_node_cost,
        coalesce(n.effective_node_cost, 0) as effective_node_cost,
        coalesce(n.allocated_cost, 0) as allocated_cost,
        coalesce(bp.bypass_cost, 0) as bypass_cost,
        coalesce(n.idle_cost, 0) as idle_cost,
        coalesce(s.shared_cost, 0) as shared_cost,
        coalesce(s.cpu_node_cost, 0) as cpu_node_cost,
        coalesce(s.storage_cost, 0) as storage_cost,
        coalesce(s.unmounted_volume_cost, 0) as unmounted_volume_cost,
        coalesce(s.tax_cost, 0) as tax_cost,
        coalesce(s.credit_cost, 0) as credit_cost,
        coalesce(s.unused_commitment_cost, 0) as unused_commitment_cost,
        coalesce(e.unreconciled_billed_cost, 0) as unreconciled_billed_cost,
        coalesce(e.unreconciled_cost, 0) as unreconciled_cost,
        coalesce(n.price_book_cost, 0) as price_book_cost,
        coalesce(ch.chargeback_total, 0) as chargeback_total,
        coalesce(ch.charged_to_teams, 0) as charged_to_teams,
        coalesce(e.exceptions, 0) as exceptions,
        coalesce(q.quarantined_rows, 0) as quarantined_rows,
        coalesce(q.quarantined_billed_cost, 0) as quarantined_billed_cost,
        coalesce(q.quarantined_effective_cost, 0) as quarantined_effective_cost,
        coalesce(q.quarantined_rows, 0) > 0 as incomplete,
        -- every effective dollar, read or quarantined, is allocated, idle, shared, tax, credit, unused commitment or held back
        coalesce(b.effective_cost, 0) + coalesce(q.quarantined_effective_cost, 0)
            - (coalesce(n.allocated_cost, 0) + coalesce(bp.bypass_cost, 0) + coalesce(n.idle_cost, 0)
               + coalesce(s.shared_cost, 0) + coalesce(s.cpu_node_cost, 0) + coalesce(s.storage_cost, 0)
               + coalesce(s.tax_cost, 0) + coalesce(s.credit_cost, 0) + coalesce(s.unused_commitment_cost, 0)
               + coalesce(e.unreconciled_billed_cost, 0))
            as difference
    from keys as k
    left join billing as b on b.day = k.day and b.currency = k.currency
    left join nodes as n on n.day = k.day and n.currency = k.currency
    left join shared as s on s.day = k.day and s.currency = k.currency
    left join charged as ch on ch.day = k.day and ch.currency = k.currency
    left join exceptions as e on e.day = k.day and e.currency = k.currency
    left join bypass as bp on bp.day = k.day and bp.currency = k.currency
    left join quarantined as q on q.day = k.day and q.currency = k.currency
    left join raw_billing as rb on rb.day = k.day and rb.currency = k.currency

)

select * from final
