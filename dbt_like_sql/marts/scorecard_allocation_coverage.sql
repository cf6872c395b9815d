-- Allocation coverage per day and currency: the share of GPU spend (allocated and unattributed
-- cost) whose request names an owner, a site and output artifacts; for all spend and per site.
with rows_on as (

    select list_contains(cast({{ var('scorecard_rows') }} as varchar[]), 'allocation_coverage') as on_

),

spend as (

    select
        p.day,
        p.currency,
        coalesce(r.site, 'unknown') as site,
        m.owner is not null as has_owner,
        coalesce(r.site, 'unknown') <> 'unknown' as has_site,
        coalesce(len(r.output_artifact_ids), 0) > 0 as has_artifact,
        p.allocated_cost as cost
    from {{ ref('int_pod_gpu_hours') }} as p
    left join {{ ref('stg_requests') }} as r on r.request_id = p.request_id
    left join {{ ref('stg_request_metadata') }} as m on m.request_id = p.request_id
    where p.day between {{ var('day_from') }} and {{ var('day_to') }} and p.currency is not null
    union all
    -- GPU time on no admitted request has no artifact; its owner is the team owning the namespace
    -- (bypass), else nobody
    select day, currency, site, bypass, site <> 'unknown', false, cost
    from {{ ref('int_unattributed_gpu_hours') }}
    where day between {{ var('day_from') }} and {{ var('day_to') }} and currency is not null

),

long as (

    select day, currency, 'all' as dimension, 'all' as subject, * exclude (day, currency, site) from spend
    union all
    select day, currency, 'site', site, * exclude (day, currency, site) from spend

),

totals as (

    select day, currency, sum(cost) as day_cost from spend group by day, currency

),

final as (

    select
        l.day,
        l.currency,
        l.dimension,
        l.subject,
        cast(sum(l.cost) as decimal(38, 6)) as cost,
        cast(sum(l.cost) filter (where l.has_owner) as decimal(38, 6)) as cost_with_owner,
        cast(sum(l.cost) filter (where l.has_site) as decimal(38, 6)) as cost_with_site,
        cast(sum(l.cost) filter (where l.has_artifact) as decimal(38, 6)) as cost_with_artifact,
        cast(sum(l.cost) filter (where l.has_owner and l.has_site and l.has_artifact) as decimal(38, 6)) as cost_covered,
        cast(coalesce(sum(l.cost) filter (where l.has_owner), 0) as double) / nullif(cast(sum(l.cost) as double), 0) as owner_share,
        cast(coalesce(sum(l.cost) filter (where l.has_site), 0) as double) / nullif(cast(sum(l.cost) as double), 0) as site_share,
        cast(coalesce(sum(l.cost) filter (where l.has_artifact), 0) as double) / nullif(cast(sum(l.cost) as double), 0) as artifact_share,
        cast(coalesce(sum(l.cost) filter (where l.has_owner and l.has_site and l.has_artifact), 0) as double)
            / nullif(cast(sum(l.cost) as double), 0) as covered_share,
        cast(sum(l.cost) as double) / nullif(cast(max(t.day_cost) as double), 0) as spend_share
    from long as l
    inner join totals as t on t.day = l.day and t.currency = l.currency
    where (select on_ from rows_on)
    group by l.day, l.currency, l.dimension, l.subject

)

select * from final
