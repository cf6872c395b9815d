-- Billed cost that is not a GPU node's: control plane, storage, network, support, tax, credits.
-- Repeated rows and GPU instances no node explains are exceptions, not shared cost.
with billing as (

    select * from {{ ref('int_billing_classes') }}
    where day between {{ var('day_from') }} and {{ var('day_to') }} and billing_class = 'shared'

),

final as (

    select
        day,
        currency,
        sum(billed_cost) as shared_cost,
        count(*) as billing_rows,
        coalesce(sum(billed_cost) filter (where billed_cost > 0), 0) as shared_charges,
        coalesce(sum(billed_cost) filter (where billed_cost < 0), 0) as shared_credits,
        -- why the day's shared cost is negative or zero (NULL when positive)
        case
            when sum(billed_cost) < 0
                then 'credits (' || cast(coalesce(sum(billed_cost) filter (where billed_cost < 0), 0) as varchar)
                    || ' ' || currency || ') exceed the day''s shared charges ('
                    || cast(coalesce(sum(billed_cost) filter (where billed_cost > 0), 0) as varchar) || ' ' || currency
                    || '): the net shared cost is negative, a refund that chargeback shares out like a charge'
            when sum(billed_cost) = 0 and count(*) filter (where billed_cost < 0) > 0
                then 'credits cancel the day''s shared charges exactly: no net shared cost'
            when sum(billed_cost) = 0 then 'the day''s shared billing rows cost nothing'
        end as reason
    from billing
    group by day, currency

)

select * from final
