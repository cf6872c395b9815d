-- Preemption impact per day by lane, team, site and flavor: attempts interrupted, their GPU-hours, and
-- the GPU-hours lost since the last checkpoint; with the GPU-hours of failed attempts and of all
-- attempts that ended, so lost work can be set against what ran (the spot signal).
with days as (

    select * from {{ ref('int_build_days') }}
    where list_contains(cast({{ var('scorecard_rows') }} as varchar[]), 'preemption_impact')

),

preempted_events as (

    select request_id, event_at, checkpoint_at from {{ ref('stg_request_events') }} where event = 'preempted'

),

attempts as (

    select
        d.day,
        p.request_id,
        p.flavor_name,
        r.lane,
        r.team,
        r.site,
        p.exit_status,
        coalesce(p.assigned_gpus, r.gpu_count) as gpus,
        epoch(p.ended_at - p.started_at) / 3600.0 as hours,
        -- hours since the recorded checkpoint (a checkpoint before the attempt started does not count)
        -- (greatest() skips NULLs, so no checkpoint must stay NULL explicitly)
        case when e.checkpoint_at is not null
             then greatest(0.0, epoch(p.ended_at - greatest(e.checkpoint_at, p.started_at)) / 3600.0)
        end as hours_since_checkpoint,
        m.preemption_policy,
        m.checkpoint_interval_s
    from {{ ref('stg_pod_requests') }} as p
    inner join days as d on p.ended_at >= d.day_start and p.ended_at < d.day_end
    inner join {{ ref('stg_requests') }} as r on r.request_id = p.request_id
    left join {{ ref('stg_request_metadata') }} as m on m.request_id = p.request_id
    left join preempted_events as e
        on p.exit_status = 'preempted' and e.request_id = p.request_id and e.event_at = p.ended_at

),

lost as (

    select
        *,
        gpus * hours as gpu_hours,
        -- the lost-work rule (docs/scorecards.md): since the checkpoint the preempted event records;
        -- else, for a job that resumes from checkpoints, at most one checkpoint interval; else (requeue,
        -- fail: the job restarts or stops) the whole attempt
        case
            when exit_status <> 'preempted' then 0.0
            when hours_since_checkpoint is not null then gpus * least(hours, hours_since_checkpoint)
            when preemption_policy = 'checkpoint_requeue'
                then gpus * least(hours, coalesce(checkpoint_interval_s, 600) / 3600.0)
            else gpus * hours
        end as lost_gpu_hours
    from attempts

),

long as (

    select day, 'lane' as dimension, lane as subject, * exclude (day) from lost
    union all
    select day, 'team', team, * exclude (day) from lost
    union all
    select day, 'site', site, * exclude (day) from lost
    union all
    select day, 'flavor', flavor_name, * exclude (day) from lost

),

final as (

    select
        day,
        dimension,
        subject,
        count(*) as ended_attempts,
        sum(gpu_hours) as ended_gpu_hours,
        count(*) filter (where exit_status = 'preempted') as interrupted_attempts,
        count(distinct request_id) filter (where exit_status = 'preempted') as interrupted_requests,
        coalesce(sum(gpu_hours) filter (where exit_status = 'preempted'), 0.0) as interrupted_gpu_hours,
        sum(lost_gpu_hours) as lost_gpu_hours,
        count(*) filter (where exit_status = 'preempted' and hours_since_checkpoint is not null) as lost_from_checkpoint,
        coalesce(sum(gpu_hours) filter (where exit_status = 'failed'), 0.0) as failed_gpu_hours
    from long
    group by day, dimension, subject

)

select * from final
