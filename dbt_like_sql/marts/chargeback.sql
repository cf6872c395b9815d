-- Chargeback per team, cost center, site and lane: direct cost + distributed idle, shared, tax and
-- credit cost, at EffectiveCost (amortized). Tax and credits are distributed by the shared policy's
-- weights, each in its own column; a commitment's unused part stays on its own '(unused commitment)'
-- row.
-- Policies (vars idle_policy / shared_policy), applied per day and within one currency only:
--   proportional: by share of the day's allocated cost (OpenCost "weighted")
--   even:         equal share per team, split inside a team by allocated cost
--   none:         not distributed; shown on an '(unallocated)' row
-- Only matched money is distributed: the money of reconciliation_exceptions with treatment
-- 'unreconciled' (a billed node without telemetry, GPU time on no admitted request in a namespace
-- nobody owns, repeated billing rows, GPU instances no node explains) stays on an '(unreconciled)'
-- row, whose unreconciled_limit (unreconciled_threshold x the day's effective + price-book cost) a
-- blocking check compares it with. A team's own pods without an admitted request (bypass), CPU
-- nodes' cost by the pods' requests and volumes' cost by the pods that mounted them are charged to
-- the team (measured, not distributed).
with policy_check as (

    select
        case
            when {{ var('idle_policy') }} not in ('proportional', 'even', 'none')
                then error('unknown idle_policy: ' || {{ var('idle_policy') }})
            when {{ var('shared_policy') }} not in ('proportional', 'even', 'none')
                then error('unknown shared_policy: ' || {{ var('shared_policy') }})
            else true
        end as ok

),

allocated_parts as (

    select
        day,
        team,
        cost_center,
        site,
        lane,
        currency,
        sum(allocated_gpu_hours) as allocated_gpu_hours,
        sum(used_gpu_hours) as used_gpu_hours,
        sum(allocated_cost) as allocated_cost,
        false as bypass,
        cast(0 as decimal(38, 6)) as cpu_cost,
        cast(0 as decimal(38, 6)) as storage_cost
    from {{ ref('fct_gpu_cost_by_request') }}
    where day between {{ var('day_from') }} and {{ var('day_to') }}
    group by all

    union all

    -- bypass: GPU time on no admitted request in a namespace the team owns, charged to the team on
    -- lane '(bypass)' (its busy time is not measured per pod here: used 0)
    select
        day,
        team,
        coalesce(cost_center, team) as cost_center,
        site,
        '(bypass)' as lane,
        currency,
        sum(gpu_hours) as allocated_gpu_hours,
        0.0 as used_gpu_hours,
        sum(cost) as allocated_cost,
        true as bypass,
        cast(0 as decimal(38, 6)) as cpu_cost,
        cast(0 as decimal(38, 6)) as storage_cost
    from {{ ref('int_unattributed_gpu_hours') }}
    where day between {{ var('day_from') }} and {{ var('day_to') }} and bypass and cost is not null
    group by day, team, cost_center, site, currency

    union all

    -- measured by use: CPU nodes' cost by the pods' CPU and memory requests, volumes' cost by the pods
    -- that mounted them (a request's lane, or '(namespace)')
    select
        day, team, cost_center, site, lane, currency,
        0.0 as allocated_gpu_hours,
        0.0 as used_gpu_hours,
        cast(0 as decimal(38, 6)) as allocated_cost,
        false as bypass,
        sum(cost) filter (where part = 'cpu') as cpu_cost,
        sum(cost) filter (where part = 'storage') as storage_cost
    from (
        select day, team, cost_center, site, lane, currency, cost, 'cpu' as part from {{ ref('int_cpu_node_cost') }}
        union all
        select day, team, cost_center, site, lane, currency, cost, 'storage' from {{ ref('int_volume_cost') }}
    )
    where day between {{ var('day_from') }} and {{ var('day_to') }} and team is not null
    group by day, team, cost_center, site, lane, currency

),

allocated as (

    select
        day, team, cost_center, site, lane, currency,
        sum(allocated_gpu_hours) as allocated_gpu_hours,
        sum(used_gpu_hours) as used_gpu_hours,
        sum(allocated_cost) as allocated_cost,
        bool_or(bypass) as bypass,
        sum(cpu_cost) as cpu_cost,
        sum(storage_cost) as storage_cost
    from allocated_parts
    group by day, team, cost_center, site, lane, currency

),

idle as (

    {% call day_currency_totals('int_idle_capacity') %}
        sum(idle_cost) as pool
    {% endcall %}

),

shared as (

    {% call day_currency_totals('int_shared_cost') %}
        sum(shared_cost) as pool,
        sum(tax_cost) as tax_pool,
        sum(credit_cost) as credit_pool,
        sum(unused_commitment_cost) as unused_pool
    {% endcall %}

),

exceptions as (

    {% call day_currency_totals('reconciliation_exceptions', equal={'treatment': 'unreconciled'}) %}
        sum(amount) as pool
    {% endcall %}

),

day_cost as (

    -- the day's cost the threshold is a share of: every piece's EffectiveCost + price-book node cost
    select day, currency, sum(cost) as cost
    from (
        select day, currency, effective_cost as cost from {{ ref('stg_focus_billing') }}
        where day between {{ var('day_from') }} and {{ var('day_to') }}
        union all
        select day, currency, node_cost from {{ ref('int_node_hour_prices') }}
        where day between {{ var('day_from') }} and {{ var('day_to') }} and price_source = 'price_book'
    )
    group by day, currency

),

pools as (

    select
        coalesce(i.day, s.day) as day,
        coalesce(i.currency, s.currency) as currency,
        coalesce(i.pool, 0) as idle_pool,
        coalesce(s.pool, 0) as shared_pool,
        coalesce(s.tax_pool, 0) as tax_pool,
        coalesce(s.credit_pool, 0) as credit_pool,
        coalesce(s.unused_pool, 0) as unused_pool
    from idle as i
    full outer join shared as s on s.day = i.day and s.currency = i.currency

),

team_totals as (

    select
        day,
        currency,
        team,
        sum(allocated_cost) as team_cost,
        count(*) as team_rows
    from allocated
    group by day, currency, team

),

currency_totals as (

    select
        day,
        currency,
        sum(allocated_cost) as currency_cost,
        count(distinct team) as teams
    from allocated
    group by day, currency

),

weights as (

    select
        a.*,
        case when c.currency_cost > 0 then cast(a.allocated_cost as double) / cast(c.currency_cost as double)
             else 0.0 end as w_proportional,
        (1.0 / c.teams) * case when t.team_cost > 0
            then cast(a.allocated_cost as double) / cast(t.team_cost as double)
            else 1.0 / t.team_rows end as w_even,
        row_number() over (
            partition by a.day, a.currency order by a.allocated_cost desc, a.team, a.cost_center, a.site, a.lane
        ) as rank_in_currency
    from allocated as a
    inner join currency_totals as c on c.day = a.day and c.currency = a.currency
    inner join team_totals as t on t.day = a.day and t.currency = a.currency and t.team = a.team

),

shares as (

    select
        w.*,
        coalesce(p.idle_pool, 0) as idle_pool,
        coalesce(p.shared_pool, 0) as shared_pool,
        coalesce(p.tax_pool, 0) as tax_pool,
        coalesce(p.credit_pool, 0) as credit_pool,
        case {{ var('idle_policy') }} when 'proportional' then w_proportional when 'even' then w_even else 0.0 end
            as w_idle,
        case {{ var('shared_policy') }} when 'proportional' then w_proportional when 'even' then w_even else 0.0 end
            as w_shared
    from weights as w
    left join pools as p on p.day = w.day and p.currency = w.currency

),

rounded as (

    select
        *,
        cast(round(cast(idle_pool as double) * w_idle, 6) as decimal(18, 6)) as idle_raw,
        cast(round(cast(shared_pool as double) * w_shared, 6) as decimal(18, 6)) as shared_raw,
        cast(round(cast(tax_pool as double) * w_shared, 6) as decimal(18, 6)) as tax_raw,
        cast(round(cast(credit_pool as double) * w_shared, 6) as decimal(18, 6)) as credit_raw
    from shares

),

distributed as (

    -- the largest row of each day and currency absorbs the rounding remainder: shares sum to the pool
    select
        day, team, cost_center, site, lane, currency, bypass,
        allocated_gpu_hours, used_gpu_hours, allocated_cost, cpu_cost, storage_cost,
        idle_raw + case when rank_in_currency = 1 and sum(w_idle) over (partition by day, currency) > 0
            then idle_pool - sum(idle_raw) over (partition by day, currency) else 0 end as idle_cost,
        shared_raw + case when rank_in_currency = 1 and sum(w_shared) over (partition by day, currency) > 0
            then shared_pool - sum(shared_raw) over (partition by day, currency) else 0 end as shared_cost,
        tax_raw + case when rank_in_currency = 1 and sum(w_shared) over (partition by day, currency) > 0
            then tax_pool - sum(tax_raw) over (partition by day, currency) else 0 end as tax_cost,
        credit_raw + case when rank_in_currency = 1 and sum(w_shared) over (partition by day, currency) > 0
            then credit_pool - sum(credit_raw) over (partition by day, currency) else 0 end as credit_cost
    from rounded

),

unallocated as (

    select
        p.day,
        '(unallocated)' as team,
        '(unallocated)' as cost_center,
        '(unallocated)' as site,
        '(unallocated)' as lane,
        p.currency,
        false as bypass,
        0.0 as allocated_gpu_hours,
        0.0 as used_gpu_hours,
        cast(0 as decimal(18, 6)) as allocated_cost,
        p.idle_pool - coalesce(d.idle_cost, 0) as idle_cost,
        p.shared_pool - coalesce(d.shared_cost, 0) as shared_cost,
        p.tax_pool - coalesce(d.tax_cost, 0) as tax_cost,
        p.credit_pool - coalesce(d.credit_cost, 0) as credit_cost,
        cast(0 as decimal(18, 6)) as unused_commitment_cost,
        cast(0 as decimal(18, 6)) as unreconciled_cost,
        cast(null as decimal(18, 6)) as unreconciled_limit
    from pools as p
    left join (
        select day, currency, sum(idle_cost) as idle_cost, sum(shared_cost) as shared_cost, sum(tax_cost) as tax_cost,
               sum(credit_cost) as credit_cost
        from distributed group by day, currency
    ) as d on d.day = p.day and d.currency = p.currency
    where p.idle_pool - coalesce(d.idle_cost, 0) <> 0 or p.shared_pool - coalesce(d.shared_cost, 0) <> 0
       or p.tax_pool - coalesce(d.tax_cost, 0) <> 0 or p.credit_pool - coalesce(d.credit_cost, 0) <> 0

),

own_lines as (

    -- money charged to no team, each on its own row: a commitment's unused part (CommitmentDiscountStatus
    -- Unused) and the day's unreconciled exception money, with the limit the blocking check compares
    select
        l.day,
        l.line as team,
        l.line as cost_center,
        l.line as site,
        l.line as lane,
        l.currency,
        false as bypass,
        0.0 as allocated_gpu_hours,
        0.0 as used_gpu_hours,
        cast(0 as decimal(18, 6)) as allocated_cost,
        cast(0 as decimal(18, 6)) as idle_cost,
        cast(0 as decimal(18, 6)) as shared_cost,
        cast(0 as decimal(18, 6)) as tax_cost,
        cast(0 as decimal(18, 6)) as credit_cost,
        case when l.line = '(unused commitment)' then l.amount else 0 end as unused_commitment_cost,
        case when l.line = '(unreconciled)' then l.amount else 0 end as unreconciled_cost,
        case when l.line = '(unreconciled)' then cast(
            coalesce(c.cost, 0) * cast({{ var('unreconciled_threshold') }} as decimal(18, 6)) as decimal(18, 6))
        end as unreconciled_limit
    from (
        select day, currency, '(unused commitment)' as line, unused_pool as amount from pools
        union all
        select day, currency, '(unreconciled)', pool from exceptions
    ) as l
    left join day_cost as c on c.day = l.day and c.currency = l.currency
    where l.amount <> 0

),

combined as (

    select
        *,
        cast(0 as decimal(18, 6)) as unused_commitment_cost,
        cast(0 as decimal(18, 6)) as unreconciled_cost,
        cast(null as decimal(18, 6)) as unreconciled_limit
    from distributed
    union all by name
    select * from unallocated
    union all by name
    select * from own_lines

),

final as (

    select
        c.day,
        c.team,
        c.cost_center,
        c.site,
        c.lane,
        c.currency,
        c.bypass,
        c.allocated_gpu_hours,
        c.used_gpu_hours,
        cast(c.allocated_cost as decimal(18, 6)) as allocated_cost,
        cast(coalesce(c.cpu_cost, 0) as decimal(18, 6)) as cpu_cost,
        cast(coalesce(c.storage_cost, 0) as decimal(18, 6)) as storage_cost,
        cast(c.idle_cost as decimal(18, 6)) as idle_cost,
        cast(c.shared_cost as decimal(18, 6)) as shared_cost,
        cast(c.tax_cost as decimal(18, 6)) as tax_cost,
        cast(c.credit_cost as decimal(18, 6)) as credit_cost,
        cast(c.unused_commitment_cost as decimal(18, 6)) as unused_commitment_cost,
        cast(c.unreconciled_cost as decimal(18, 6)) as unreconciled_cost,
        cast(c.unreconciled_limit as decimal(18, 6)) as unreconciled_limit,
        cast(c.allocated_cost + coalesce(c.cpu_cost, 0) + coalesce(c.storage_cost, 0) + c.idle_cost + c.shared_cost + c.tax_cost + c.credit_cost
             + c.unused_commitment_cost + c.unreconciled_cost as decimal(18, 6)) as total_cost,
        {{ var('idle_policy') }} as idle_policy,
        {{ var('shared_policy') }} as shared_policy,
        -- why the row's shared cost is negative or zero (NULL when positive)
        case
            when c.shared_cost < 0
                then 'the day''s refunds exceed its shared charges (net shared cost '
                    || cast(p.shared_pool as varchar) || ' ' || c.currency || '): this share of it is a refund'
            when c.shared_cost > 0 then null
            when c.team = '(unreconciled)' then 'the (unreconciled) row holds exception money only, no shared cost'
            when c.team = '(unused commitment)' then 'the (unused commitment) row holds unused commitment only, no shared cost'
            when coalesce(p.shared_pool, 0) = 0
                then 'no net shared platform cost on the day (no shared charges, or refunds cancel them)'
            when c.team = '(unallocated)' then 'all of the day''s shared cost was distributed to teams'
            when {{ var('shared_policy') }} = 'none'
                then 'shared_policy none: the shared cost stays on the (unallocated) row'
            when c.allocated_cost = 0
                then 'no allocated cost on the day, so no proportional share of the shared cost'
            else 'its share of the shared cost rounds to 0'
        end as shared_cost_reason
    from combined as c
    left join pools as p on p.day = c.day and p.currency = c.currency
    cross join policy_check
    where policy_check.ok

)

select * from final
