-- Queue wait per day and lane / team / site / flavor: p50, p95 and max of the waits that ended in
-- an admission that day, the waits still open at the day's end, and the median run time of the
-- attempts that succeeded that day (the "training time" the wait is compared with).
with days as (

    select * from {{ ref('int_build_days') }}
    where list_contains(cast({{ var('scorecard_rows') }} as varchar[]), 'queue_wait')

),

dimensions as (

    select * from (values ('lane'), ('team'), ('site'), ('flavor')) as t(dimension)

),

waits as (

    select
        d.day,
        w.*,
        -- seconds waited by the end of this day (a wait open across days counts on each)
        epoch(least(w.wait_end, d.day_end) - w.wait_start) as waited_s,
        w.admitted_at is not null and w.admitted_at >= d.day_start and w.admitted_at < d.day_end as admitted_today,
        w.wait_end >= d.day_end or (w.open and w.wait_end >= d.day_start) as open_at_day_end
    from {{ ref('int_queue_waits') }} as w
    inner join days as d on w.wait_start < d.day_end and w.wait_end >= d.day_start

),

runs as (

    select
        d.day,
        p.flavor_name,
        r.lane,
        r.team,
        r.site,
        epoch(p.ended_at - p.started_at) as run_s
    from {{ ref('stg_pod_requests') }} as p
    inner join {{ ref('stg_requests') }} as r on r.request_id = p.request_id
    inner join days as d on p.ended_at >= d.day_start and p.ended_at < d.day_end
    where p.exit_status in ('succeeded', 'completed')

),

wait_rows as (

    select
        w.day,
        x.dimension,
        case x.dimension when 'lane' then w.lane when 'team' then w.team when 'site' then w.site
             else coalesce(w.flavor_name, '(not admitted)') end as subject,
        count(*) filter (where w.admitted_today) as admissions,
        quantile_cont(w.wait_s, 0.5) filter (where w.admitted_today) as wait_p50_s,
        quantile_cont(w.wait_s, 0.95) filter (where w.admitted_today) as wait_p95_s,
        max(w.wait_s) filter (where w.admitted_today) as wait_max_s,
        count(*) filter (where w.open_at_day_end) as open_waits,
        max(w.waited_s) filter (where w.open_at_day_end) as open_wait_max_s
    from waits as w
    cross join dimensions as x
    group by all

),

run_rows as (

    select
        r.day,
        x.dimension,
        case x.dimension when 'lane' then r.lane when 'team' then r.team when 'site' then r.site
             else r.flavor_name end as subject,
        count(*) as runs,
        quantile_cont(r.run_s, 0.5) as run_p50_s
    from runs as r
    cross join dimensions as x
    group by all

),

final as (

    select
        w.day,
        w.dimension,
        w.subject,
        w.admissions,
        w.wait_p50_s,
        w.wait_p95_s,
        w.wait_max_s,
        w.open_waits,
        w.open_wait_max_s,
        coalesce(r.runs, 0) as succeeded_runs,
        r.run_p50_s
    from wait_rows as w
    left join run_rows as r on r.day = w.day and r.dimension = w.dimension and r.subject = w.subject

)

select * from final
