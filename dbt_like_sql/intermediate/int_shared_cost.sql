-- The day's billed cost that is not a GPU node's, per home (docs/finops.md, "Every row has a home"),
-- at its EffectiveCost (amortized): shared (control plane, storage, network, support, rounding and
-- other adjustments, refunds of those), tax, credit, unused commitment; and the commitments' purchase
-- fees at their BilledCost (their EffectiveCost is 0: the usage they cover carries them).
-- Repeated rows and GPU instances no node explains are exceptions, not shared cost. The part of
-- CPU nodes' cost their pods requested (int_cpu_node_cost, a team found) and volumes' cost by the pods
-- that mounted them (int_volume_cost, a team found) are allocated, not shared; a volume's unmounted
-- hours stay shared, named (unmounted_volume_cost).
with billing as (

    select * from {{ ref('int_billing_classes') }}
    where day between {{ var('day_from') }} and {{ var('day_to') }}
      and billing_class in ('shared', 'tax', 'credit', 'unused_commitment', 'commitment_purchase')

),

sums as (

    select
        day,
        currency,
        -- a commitment purchase's EffectiveCost is 0 (FOCUS); one that is not (a provider that does not
        -- amortize it) is shared like any other charge, so no effective money is without a home
        coalesce(sum(effective_cost) filter (where billing_class in ('shared', 'commitment_purchase')), 0)
            as shared_gross,
        count(*) filter (where billing_class = 'shared') as billing_rows,
        coalesce(sum(effective_cost) filter (where billing_class = 'shared' and effective_cost > 0), 0) as shared_charges,
        coalesce(sum(effective_cost) filter (where billing_class = 'shared' and effective_cost < 0), 0) as shared_credits,
        coalesce(sum(effective_cost) filter (where billing_class = 'tax'), 0) as tax_cost,
        coalesce(sum(effective_cost) filter (where billing_class = 'credit'), 0) as credit_cost,
        coalesce(sum(effective_cost) filter (where billing_class = 'unused_commitment'), 0) as unused_commitment_cost,
        coalesce(sum(billed_cost) filter (where billing_class = 'commitment_purchase'), 0) as commitment_purchase_billed,
        coalesce(sum(effective_cost) filter (where billing_class = 'commitment_purchase'), 0)
            as commitment_purchase_effective
    from billing
    group by day, currency

),

cpu as (

    select day, currency, sum(cost) as cpu_node_allocated_cost
    from {{ ref('int_cpu_node_cost') }}
    where day between {{ var('day_from') }} and {{ var('day_to') }} and team is not null
    group by day, currency

),

storage as (

    select
        day,
        currency,
        coalesce(sum(cost) filter (where team is not null), 0) as storage_allocated_cost,
        coalesce(sum(cost) filter (where owner_rule = 'unmounted'), 0) as unmounted_volume_cost
    from {{ ref('int_volume_cost') }}
    where day between {{ var('day_from') }} and {{ var('day_to') }}
    group by day, currency

),

netted as (

    select
        s.* exclude (shared_gross),
        s.shared_gross - coalesce(c.cpu_node_allocated_cost, 0) - coalesce(v.storage_allocated_cost, 0) as shared_cost,
        coalesce(c.cpu_node_allocated_cost, 0) as cpu_node_allocated_cost,
        coalesce(v.storage_allocated_cost, 0) as storage_allocated_cost,
        coalesce(v.unmounted_volume_cost, 0) as unmounted_volume_cost
    from sums as s
    left join cpu as c on c.day = s.day and c.currency = s.currency
    left join storage as v on v.day = s.day and v.currency = s.currency

),

final as (

    select
        *,
        -- why the day's shared cost is negative or zero (NULL when positive)
        case
            when shared_cost < 0 and shared_credits = 0
                then 'CPU nodes'' and volumes'' cost allocated by use rounds above the day''s shared charges'
            when shared_cost < 0
                then 'refunds (' || cast(shared_credits as varchar) || ' ' || currency
                    || ') exceed the day''s shared charges (' || cast(shared_charges as varchar) || ' ' || currency
                    || '): the net shared cost is negative, a refund that chargeback shares out like a charge'
            when shared_cost = 0 and billing_rows = 0
                then 'no shared billing rows on the day (only tax, credits or commitments)'
            when shared_cost = 0 and shared_credits < 0
                then 'refunds cancel the day''s shared charges exactly: no net shared cost'
            when shared_cost = 0 and (cpu_node_allocated_cost <> 0 or storage_allocated_cost <> 0)
                then 'all of the day''s shared charges were CPU node or volume cost charged to the pods that used it'
            when shared_cost = 0 then 'the day''s shared billing rows cost nothing'
        end as reason
    from netted

)

select * from final
