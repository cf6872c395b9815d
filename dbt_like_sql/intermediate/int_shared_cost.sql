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
        count(*) as billing_rows
    from billing
    group by day, currency

)

select * from final
