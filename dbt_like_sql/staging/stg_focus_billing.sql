-- FOCUS billing rows prorated to the UTC days their charge period covers, FOCUS names snake_case.
-- A row's BilledCost and EffectiveCost are each split by the share of its [ChargePeriodStart,
-- ChargePeriodEnd) on each day (23:00-01:00 is half on each day); every piece but the last day's is
-- rounded to 1e-6 and the last day takes the remainder, so the pieces add up to the row exactly
-- whichever days are built.
-- charge_kind says what the row is, from the FOCUS columns alone (no provider special case):
--   commitment_purchase: ChargeCategory Purchase of a commitment (CommitmentDiscountId set): its
--                        BilledCost is the fee, its EffectiveCost 0 (FOCUS: amortized into the
--                        usage the commitment covers), so it is never counted beside that usage
--   unused_commitment:   CommitmentDiscountStatus Unused: the commitment's unused part
--   tax / credit:        ChargeCategory Tax / Credit
--   usage:               everything else (Usage, Adjustment, other purchases such as support)
-- A row whose period is empty or inverted is charged to the day it starts.
-- Rows repeated in content (the same charge in two exports) keep the first by (source, source_row);
-- the others are flagged is_duplicate and end on reconciliation_exceptions, never in a price.
with source as (

    -- the load day (`day`) is the ingestion partition; pieces get their own day below
    select
        * exclude (day),
        case when ChargePeriodEnd > ChargePeriodStart then ChargePeriodEnd else ChargePeriodStart end as period_end
    from {{ source('raw_focus_billing') }}
    where ChargePeriodStart < {{ var('day_to') }}::timestamp + interval 1 day
      and ChargePeriodStart >= {{ var('day_from') }}::timestamp - interval 400 day
      and (ChargePeriodEnd > {{ var('day_from') }}::timestamp or ChargePeriodStart >= {{ var('day_from') }}::timestamp)

),

flagged as (

    select
        *,
        row_number() over (
            partition by BillingAccountId, SubAccountId, ResourceId, ResourceName, ChargePeriodStart, ChargePeriodEnd,
                ChargeCategory, ChargeClass, ChargeDescription, SkuId, SkuPriceId, BilledCost, EffectiveCost,
                BillingCurrency, ConsumedQuantity, Tags, extra_columns
            order by source, source_row
        ) > 1 as is_duplicate
    from source

),

pieces as (

    select
        f.*,
        cast(d.d as date) as day,
        epoch(f.period_end - f.ChargePeriodStart) as period_s,
        epoch(least(f.period_end, cast(d.d as timestamp) + interval 1 day)
              - greatest(f.ChargePeriodStart, cast(d.d as timestamp))) as day_s,
        cast(d.d as date) = cast(f.period_end - interval 1 microsecond as date)
            or f.period_end = f.ChargePeriodStart as is_last
    from flagged as f,
        unnest(generate_series(
            date_trunc('day', f.ChargePeriodStart),
            date_trunc('day', greatest(f.period_end - interval 1 microsecond, f.ChargePeriodStart)),
            interval 1 day
        )) as d(d)

),

costed as (

    select
        *,
        cast(BilledCost as decimal(18, 6)) as row_billed_cost,
        case when period_s > 0 then day_s / period_s else 1.0 end as day_share,
        cast(case when period_s > 0 then round(cast(BilledCost as double) * day_s / period_s, 6)
                  else cast(BilledCost as double) end as decimal(18, 6)) as rounded_piece,
        -- EffectiveCost is Mandatory and never NULL in FOCUS (the loader quarantines a NULL); a raw
        -- table another writer filled without it falls back to BilledCost, never to 0
        coalesce(cast(EffectiveCost as decimal(18, 6)), cast(BilledCost as decimal(18, 6))) as row_effective_cost,
        cast(case when period_s > 0 then round(cast(coalesce(EffectiveCost, BilledCost) as double) * day_s / period_s, 6)
                  else cast(coalesce(EffectiveCost, BilledCost) as double) end as decimal(18, 6)) as rounded_effective_piece,
        -- the row as the raw table keeps it (DECIMAL(38, 15), the loader's type: this cast can never
        -- overflow, so it is no bound of focus.WAREHOUSE_DECIMALS): the exact pieces below
        BilledCost::decimal(38, 15) as row_billed_exact,
        coalesce(EffectiveCost, BilledCost)::decimal(38, 15) as row_effective_exact
    from pieces

),

settled as (

    select
        *,
        -- the last day takes what the earlier days' rounded pieces left
        case when is_last
            then row_billed_cost - coalesce(sum(rounded_piece) over (partition by source, source_row) - rounded_piece, 0)
            else rounded_piece end as billed_piece,
        -- EffectiveCost likewise
        case when is_last
            then row_effective_cost
                - coalesce(sum(rounded_effective_piece) over (partition by source, source_row) - rounded_effective_piece, 0)
            else rounded_effective_piece end as effective_piece,
        -- exact: a one-day row is its own amount, unrounded (100,000 rows of 0.0000004 sum to 0.04);
        -- a row over several days has the same rounded pieces but the last takes the exact rest
        case when is_last
            then row_billed_exact - coalesce(sum(rounded_piece) over (partition by source, source_row) - rounded_piece, 0)
            else rounded_piece end as billed_exact_piece,
        case when is_last
            then row_effective_exact
                - coalesce(sum(rounded_effective_piece) over (partition by source, source_row) - rounded_effective_piece, 0)
            else rounded_effective_piece end as effective_exact_piece
    from costed

),

final as (

    select
        day,
        ChargePeriodStart as charge_period_start,
        ChargePeriodEnd as charge_period_end,
        greatest(ChargePeriodStart, cast(day as timestamp)) as day_period_start,
        least(period_end, cast(day as timestamp) + interval 1 day) as day_period_end,
        day_share,
        lower(ResourceId) as resource_id,
        -- the provider identity (same rules as gpu_platform.finops.feeds.k8s_inventory.provider_key)
        case
            when regexp_matches(lower(ResourceId), '^(aws://|arn:aws|i-|vol-)')
                then nullif('aws:' || regexp_extract(lower(ResourceId), '(?:^|/)((?:i|vol)-[0-9a-z]+)$', 1), 'aws:')
            when starts_with(lower(ResourceId), '/subscriptions/') then 'azure:' || lower(ResourceId)
            when starts_with(lower(ResourceId), 'azure://') then 'azure:' || substr(lower(ResourceId), 9)
            when starts_with(lower(ResourceId), 'gce://') and len(string_split(substr(lower(ResourceId), 7), '/')) = 3
                then 'gce:' || substr(lower(ResourceId), 7)
            when contains(lower(ResourceId), 'googleapis.com')
                and regexp_matches(lower(ResourceId), 'projects/[^/]+/zones/[^/]+/instances/[^/]+$')
                then 'gce:' || regexp_replace(lower(ResourceId), '^.*projects/([^/]+)/zones/([^/]+)/instances/([^/]+)$',
                                              '\1/\2/\3')
            when contains(lower(ResourceId), 'googleapis.com')
                and regexp_matches(lower(ResourceId), 'projects/[^/]+/(zones|regions)/[^/]+/disks/[^/]+$')
                then 'gce-disk:' || regexp_replace(lower(ResourceId),
                                                   '^.*projects/([^/]+)/(?:zones|regions)/([^/]+)/disks/([^/]+)$',
                                                   '\1/\2/\3')
            when regexp_matches(lower(ResourceId), '^[0-9]{10,}$') then 'gce-id:' || lower(ResourceId)
            when regexp_matches(lower(ResourceId), '^(oci://|ocid1\.instance)')
                then nullif('oci:' || regexp_extract(lower(ResourceId), '(ocid1\.instance\.[0-9a-z._-]+)$', 1), 'oci:')
        end as resource_key,
        ResourceName as resource_name,
        -- the virtual machine a row names (lower-case): Azure's x_SkuDetails VMName (its cost details'
        -- AdditionalInfo, kept in extra_columns), else ResourceName; int_billing_nodes gives a scale
        -- set's row to the instance it names
        -- (read for a scale set's rows only: no other row is given to an instance by it)
        case when contains(lower(ResourceId), '/virtualmachinescalesets/') then lower(coalesce(
            case when json_valid(extra_columns) and json_valid(json_extract_string(extra_columns, '$.x_SkuDetails'))
                 then coalesce(json_extract_string(json_extract_string(extra_columns, '$.x_SkuDetails'), '$.VMName'),
                               json_extract_string(json_extract_string(extra_columns, '$.x_SkuDetails'), '$.VmName'))
            end,
            ResourceName)) end as vm_name,
        ResourceType as resource_type,
        ServiceName as service_name,
        ServiceCategory as service_category,
        ChargeCategory as charge_category,
        ChargeClass as charge_class,
        ChargeDescription as charge_description,
        PricingCategory as pricing_category,
        CommitmentDiscountId as commitment_discount_id,
        CommitmentDiscountType as commitment_discount_type,
        CommitmentDiscountCategory as commitment_discount_category,
        CommitmentDiscountStatus as commitment_discount_status,
        case
            when lower(ChargeCategory) = 'purchase' and CommitmentDiscountId is not null then 'commitment_purchase'
            when lower(CommitmentDiscountStatus) = 'unused' then 'unused_commitment'
            when lower(ChargeCategory) = 'tax' then 'tax'
            when lower(ChargeCategory) = 'credit' then 'credit'
            else 'usage'
        end as charge_kind,
        SkuId as sku_id,
        RegionId as region_id,
        ProviderName as provider_name,
        BillingAccountId as billing_account_id,
        SubAccountId as sub_account_id,
        row_billed_cost,
        row_effective_cost,
        cast(billed_piece as decimal(18, 6)) as billed_cost,
        cast(effective_piece as decimal(18, 6)) as effective_cost,
        -- the same pieces unrounded (DECIMAL(38, 15)): what the day's totals sum; the models that
        -- price and distribute use the 1e-6 pieces above, and reconciliation shows the difference
        billed_exact_piece::decimal(38, 15) as billed_cost_exact,
        effective_exact_piece::decimal(38, 15) as effective_cost_exact,
        upper(BillingCurrency) as currency,
        -- the day's share of the row's ConsumedQuantity (a node's hours when its unit is hours)
        cast(ConsumedQuantity as double) * day_share as consumed_quantity,
        ConsumedUnit as consumed_unit,
        is_duplicate,
        source,
        source_row
    from settled
    where day between {{ var('day_from') }} and {{ var('day_to') }}

)

select * from final
