-- Failure and retry rate per day by image, dataset, GPU type (the flavor it ran on), workload,
-- lane, team and site, over the attempts that ended that day; with the OOM failures among them and those retried.
with days as (

    select * from {{ ref('int_build_days') }}
    where list_contains(cast({{ var('scorecard_rows') }} as varchar[]), 'failure_retry')

),

last_attempt as (

    select request_id, max(attempt) as last_attempt from {{ ref('stg_pod_requests') }} group by request_id

),

failed_runs as (

    select request_id, recorded_at, oom from {{ ref('stg_workload_runs') }} where status = 'failed'

),

failed_events as (

    -- a failure reason the ledger or the cluster recorded (Kubernetes' OOMKilled termination reason)
    select request_id, event_at, reason from {{ ref('stg_request_events') }}
    where event in ('failed', 'cluster') and regexp_matches(reason, '(?i)oomkilled|out of memory')

),

attempts as (

    select
        d.day,
        p.request_id,
        p.attempt,
        p.flavor_name,
        r.lane,
        r.team,
        r.site,
        r.workload,
        coalesce(m.container_digest, m.image, '(unknown)') as image,
        coalesce(m.dataset_ids, []) as dataset_ids,
        p.exit_status = 'failed' as failed,
        p.exit_status = 'preempted' as preempted,
        p.attempt > 1 as retry,
        p.attempt < l.last_attempt as followed_by_retry,
        p.exit_status = 'failed' and (
            exists (select 1 from failed_runs as f where f.request_id = p.request_id and f.oom
                    and f.recorded_at >= p.started_at and f.recorded_at <= p.ended_at + interval 1 hour)
            or exists (select 1 from failed_events as e where e.request_id = p.request_id
                       and e.event_at >= p.started_at and e.event_at <= p.ended_at + interval 1 hour)
        ) as oom
    from {{ ref('stg_pod_requests') }} as p
    inner join days as d on p.ended_at >= d.day_start and p.ended_at < d.day_end
    inner join {{ ref('stg_requests') }} as r on r.request_id = p.request_id
    inner join last_attempt as l on l.request_id = p.request_id
    left join {{ ref('stg_request_metadata') }} as m on m.request_id = p.request_id

),

long as (

    select day, 'image' as dimension, image as subject, * exclude (day, image) from attempts
    union all
    select day, 'gpu_type', flavor_name, * exclude (day, image) from attempts
    union all
    select day, 'workload', workload, * exclude (day, image) from attempts
    union all
    select day, 'lane', lane, * exclude (day, image) from attempts
    union all
    select day, 'team', team, * exclude (day, image) from attempts
    union all
    select day, 'site', site, * exclude (day, image) from attempts
    union all
    select a.day, 'dataset', ds.dataset_id, a.* exclude (day, image)
    from attempts as a, unnest(case when len(a.dataset_ids) = 0 then ['(none)'] else a.dataset_ids end) as ds(dataset_id)

),

oom_on as (

    select list_contains(cast({{ var('scorecard_rows') }} as varchar[]), 'oom_retries') as on_

),

final as (

    select
        day,
        dimension,
        subject,
        count(*) as attempts,
        count(*) filter (where failed) as failed_attempts,
        count(*) filter (where preempted) as preempted_attempts,
        count(*) filter (where retry) as retry_attempts,
        count(*) filter (where failed) / count(*) as failure_rate,
        count(*) filter (where retry) / count(*) as retry_rate,
        case when (select on_ from oom_on) then count(*) filter (where oom) end as oom_failures,
        case when (select on_ from oom_on) then count(*) filter (where oom and followed_by_retry) end as oom_retries,
        case when (select on_ from oom_on) then count(*) filter (where oom and followed_by_retry) / count(*) end
            as oom_retry_rate
    from long
    group by day, dimension, subject

)

select * from final
