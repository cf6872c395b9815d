-- Month-end spend forecast per team and lane, as of each day built (its month so far):
--   forecast = month_to_date + pending_cost + run_rate_per_day x days_remaining
-- month_to_date: chargeback total_cost of the month's days up to and including the day;
-- run_rate_per_day: month_to_date / days elapsed (the day included);
-- pending_cost: the pending queue's expected GPU-hours (gpu_count x expected_duration, at most the
-- hours left in the month) x the lane's unit rate (its month-to-date total_cost / allocated
-- GPU-hours over every team; a lane without GPU-hours this month takes every lane's rate).
with days as (

    select
        cast(d as date) as day,
        cast(date_trunc('month', d) as date) as month_start,
        cast(last_day(d) as date) as month_end
    from unnest(generate_series(
        {{ var('day_from') }}::timestamp, {{ var('day_to') }}::timestamp, interval 1 day
    )) as t(d)

),

spend as (

    -- teams' rows only: (unallocated), (unreconciled) and (unused commitment) belong to no team
    select day, team, lane, currency, total_cost, coalesce(allocated_gpu_hours, 0) as allocated_gpu_hours
    from {{ ref('chargeback') }}
    where day between cast(date_trunc('month', {{ var('day_from') }}::date) as date) and {{ var('day_to') }}
        and team not in ('(unallocated)', '(unreconciled)', '(unused commitment)')

),

mtd as (

    select
        d.day,
        s.team,
        s.lane,
        s.currency,
        sum(s.total_cost) as month_to_date_cost,
        sum(s.allocated_gpu_hours) as month_to_date_gpu_hours
    from days as d
    inner join spend as s on s.day between d.month_start and d.day
    group by d.day, s.team, s.lane, s.currency

),

lane_rates as (

    -- one currency per lane: the one it held the most GPU-hours in this month
    select day, lane, currency, cast(sum(month_to_date_cost) as double) / sum(month_to_date_gpu_hours) as unit_rate
    from mtd
    group by day, lane, currency
    having sum(month_to_date_gpu_hours) > 0
    qualify row_number() over (partition by day, lane order by sum(month_to_date_gpu_hours) desc, currency) = 1

),

all_rates as (

    select day, currency, cast(sum(month_to_date_cost) as double) / sum(month_to_date_gpu_hours) as unit_rate
    from mtd
    group by day, currency
    having sum(month_to_date_gpu_hours) > 0
    qualify row_number() over (partition by day order by sum(month_to_date_gpu_hours) desc, currency) = 1

),

pending as (

    -- the ledger snapshot's pending requests (submitted, waiting, requeued)
    select r.request_id, r.team, r.lane, r.gpu_count, r.submitted_at, m.expected_duration_s
    from {{ ref('stg_requests') }} as r
    left join {{ ref('stg_request_metadata') }} as m on m.request_id = r.request_id
    where r.state in ('submitted', 'waiting', 'requeued')

),

queue as (

    -- a request submitted by the end of the day; its expected hours are capped at what is left
    -- of the month after the day (it cannot start earlier)
    select
        d.day,
        p.team,
        p.lane,
        count(*) as pending_requests,
        count(*) filter (where p.expected_duration_s is null) as pending_without_duration,
        coalesce(sum(p.gpu_count * case when p.expected_duration_s is not null  -- least() skips NULLs
                     then least(p.expected_duration_s, datediff('day', d.day, d.month_end) * 86400.0) end)
                 / 3600.0, 0) as pending_gpu_hours
    from days as d
    inner join pending as p on p.submitted_at < d.day + 1
    group by d.day, p.team, p.lane

),

queue_priced as (

    select
        q.*,
        coalesce(l.currency, a.currency) as currency,
        coalesce(l.unit_rate, a.unit_rate) as unit_rate,
        case when l.unit_rate is not null then 'lane' else 'all_lanes' end as unit_rate_source
    from queue as q
    left join lane_rates as l on l.day = q.day and l.lane = q.lane
    left join all_rates as a on a.day = q.day
    where coalesce(l.unit_rate, a.unit_rate) is not null

),

keys as (

    select day, team, lane, currency from mtd
    union
    select day, team, lane, currency from queue_priced

),

combined as (

    select
        k.day,
        k.team,
        k.lane,
        k.currency,
        d.month_start,
        d.month_end,
        cast(extract(day from k.day) as integer) as days_elapsed,
        cast(datediff('day', k.day, d.month_end) as integer) as days_remaining,
        cast(coalesce(m.month_to_date_cost, 0) as decimal(18, 6)) as month_to_date_cost,
        coalesce(m.month_to_date_gpu_hours, 0) as month_to_date_gpu_hours,
        cast(coalesce(m.month_to_date_cost, 0) / extract(day from k.day) as decimal(18, 6)) as run_rate_per_day,
        coalesce(q.pending_requests, 0) as pending_requests,
        coalesce(q.pending_without_duration, 0) as pending_without_duration,
        coalesce(q.pending_gpu_hours, 0) as pending_gpu_hours,
        q.unit_rate,
        q.unit_rate_source,
        cast(coalesce(round(q.pending_gpu_hours * q.unit_rate, 6), 0) as decimal(18, 6)) as pending_cost
    from keys as k
    inner join days as d on d.day = k.day
    left join mtd as m on m.day = k.day and m.team = k.team and m.lane = k.lane and m.currency = k.currency
    left join queue_priced as q on q.day = k.day and q.team = k.team and q.lane = k.lane and q.currency = k.currency

),

final as (

    select
        *,
        cast(run_rate_per_day * days_remaining as decimal(18, 6)) as run_rate_cost,
        cast(month_to_date_cost + pending_cost + run_rate_per_day * days_remaining as decimal(18, 6))
            as forecast_month_end_cost
    from combined

)

select * from final
