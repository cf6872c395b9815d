-- FOCUS billing rows by the UTC day their charge period starts on, FOCUS names turned snake_case.
with source as (

    select * from {{ source('raw_focus_billing') }}
    where ChargePeriodStart >= {{ var('day_from') }}::timestamp
      and ChargePeriodStart < {{ var('day_to') }}::timestamp + interval 1 day

),

final as (

    select
        cast(ChargePeriodStart as date) as day,
        ChargePeriodStart as charge_period_start,
        ChargePeriodEnd as charge_period_end,
        -- node rows: ResourceId is the Kubernetes node name, which DCGM reports as hostname
        lower(ResourceId) as resource_id,
        ResourceName as resource_name,
        ResourceType as resource_type,
        ServiceName as service_name,
        ServiceCategory as service_category,
        ChargeCategory as charge_category,
        ChargeClass as charge_class,
        ChargeDescription as charge_description,
        SkuId as sku_id,
        RegionId as region_id,
        ProviderName as provider_name,
        BillingAccountId as billing_account_id,
        SubAccountId as sub_account_id,
        cast(BilledCost as decimal(18, 6)) as billed_cost,
        cast(EffectiveCost as decimal(18, 6)) as effective_cost,
        upper(BillingCurrency) as currency,
        source,
        source_row
    from source

)

select * from final
