-- Budget burn per lane and team budget (var budgets: scope|subject|amount, from the policy), as of
-- each day built. The month's budget is the policy's per budget_period (month as is; week x
-- days_in_month / 7; day x days_in_month), in budget_currency. Spend is assumed to go on linearly
-- from the day to month end at the forecast's pace:
--   daily_projected = (forecast_month_end - month_to_date) / days_remaining
--   days_left = ceil((budget - month_to_date) / daily_projected), projected_exceed_day = day + days_left
-- fired exactly when forecast_month_end > budget (already over: days_left 0, the day itself).
-- Bypass spend (a team's GPU time on no admitted request, lane '(bypass)' in chargeback) is charged
-- to the team: a team budget counts it (bypass_cost shows how much of month_to_date_cost it is).
-- It is no lane's, so no lane budget counts it; the row scope 'bypass', subject '(bypass)' shows
-- all of it (status unbudgeted: no budget covers it, it never fires).
with budgets as (

    select
        split_part(t, '|', 1) as scope,
        split_part(t, '|', 2) as subject,
        cast(split_part(t, '|', 3) as decimal(18, 6)) as period_budget
    from unnest(cast({{ var('budgets') }} as varchar[])) as u(t)

),

days as (

    select
        cast(d as date) as day,
        cast(last_day(d) as date) as month_end,
        cast(extract(day from last_day(d)) as integer) as days_in_month
    from unnest(generate_series(
        {{ var('day_from') }}::timestamp, {{ var('day_to') }}::timestamp, interval 1 day
    )) as t(d)

),

forecast as (

    select * from {{ ref('cost_forecast') }}
    where day between {{ var('day_from') }} and {{ var('day_to') }} and currency = {{ var('budget_currency') }}

),

by_subject as (

    select day, 'lane' as scope, lane as subject, sum(month_to_date_cost) as month_to_date_cost,
           sum(forecast_month_end_cost) as forecast_month_end_cost, 0 as bypass_cost
    from forecast group by day, lane
    union all
    select day, 'team' as scope, team as subject, sum(month_to_date_cost) as month_to_date_cost,
           sum(forecast_month_end_cost) as forecast_month_end_cost,
           coalesce(sum(month_to_date_cost) filter (where lane = '(bypass)'), 0) as bypass_cost
    from forecast group by day, team

),

judged as (

    select
        d.day,
        b.scope,
        b.subject,
        cast({{ var('budget_currency') }} as varchar) as currency,
        cast({{ var('budget_period') }} as varchar) as budget_period,
        cast(case {{ var('budget_period') }}
            when 'month' then b.period_budget
            when 'week' then round(b.period_budget * d.days_in_month / 7, 6)
            when 'day' then b.period_budget * d.days_in_month
            else error('budget_period must be day, week or month')
        end as decimal(18, 6)) as month_budget,
        cast(coalesce(s.month_to_date_cost, 0) as decimal(18, 6)) as month_to_date_cost,
        cast(coalesce(s.forecast_month_end_cost, 0) as decimal(18, 6)) as forecast_month_end_cost,
        cast(coalesce(s.bypass_cost, 0) as decimal(18, 6)) as bypass_cost,
        cast(datediff('day', d.day, d.month_end) as integer) as days_remaining
    from days as d
    cross join budgets as b
    left join by_subject as s on s.day = d.day and s.scope = b.scope and s.subject = b.subject

),

bypass as (

    -- every team's bypass spend of the month: no lane budget covers it
    select
        d.day,
        'bypass' as scope,
        '(bypass)' as subject,
        cast({{ var('budget_currency') }} as varchar) as currency,
        cast({{ var('budget_period') }} as varchar) as budget_period,
        cast(0 as decimal(18, 6)) as month_budget,
        cast(s.month_to_date_cost as decimal(18, 6)) as month_to_date_cost,
        cast(s.forecast_month_end_cost as decimal(18, 6)) as forecast_month_end_cost,
        cast(s.month_to_date_cost as decimal(18, 6)) as bypass_cost,
        cast(datediff('day', d.day, d.month_end) as integer) as days_remaining,
        false as fired,
        'unbudgeted' as status,
        cast(null as integer) as days_left,
        cast(s.forecast_month_end_cost as decimal(18, 6)) as projected_overrun
    from days as d
    inner join by_subject as s on s.day = d.day and s.scope = 'lane' and s.subject = '(bypass)'

),

burn as (

    select
        *,
        forecast_month_end_cost > month_budget as fired,
        case
            when month_to_date_cost > month_budget then 'over_budget'
            when forecast_month_end_cost > month_budget then 'will_exceed'
            else 'within_budget'
        end as status,
        case
            when month_to_date_cost > month_budget then 0
            when forecast_month_end_cost > month_budget then greatest(1, cast(ceil(
                cast(month_budget - month_to_date_cost as double)
                / (cast(forecast_month_end_cost - month_to_date_cost as double) / days_remaining)) as integer))
        end as days_left,
        cast(forecast_month_end_cost - month_budget as decimal(18, 6)) as projected_overrun
    from judged

),

final as (

    select
        *,
        cast(day + days_left as date) as projected_exceed_day
    from burn
    union all by name
    select *, cast(null as date) as projected_exceed_day from bypass

)

select * from final
