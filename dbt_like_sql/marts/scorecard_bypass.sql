-- Bypass rate per day: GPU time on no admitted request against GPU time of admitted requests (how
-- much of it was charged to the team owning the pod's namespace, how much nobody owns), the Jobs
-- on the cluster the ledger cannot match (seen by the read-back that day), and the approved
-- policy exceptions (safety approvals, cost exceptions) the ledger recorded that day, and the
-- break-glass (incident) grants: granted that day, and still without a recorded retrospective at
-- the day's end (`gpu-platform approve --due` lists those already due: used or expired).
with days as (

    select * from {{ ref('int_build_days') }}
    where list_contains(cast({{ var('scorecard_rows') }} as varchar[]), 'bypass_rate')

),

attributed as (

    select day, sum(allocated_gpu_hours) as gpu_hours from {{ ref('int_pod_gpu_hours') }}
    where day between {{ var('day_from') }} and {{ var('day_to') }}
    group by day

),

unattributed as (

    select
        day,
        sum(gpu_hours) as gpu_hours,
        count(*) as pods,
        coalesce(sum(gpu_hours) filter (where bypass), 0.0) as owned_gpu_hours,
        coalesce(sum(gpu_hours) filter (where not bypass), 0.0) as unowned_gpu_hours,
        string_agg(distinct team, ',' order by team) filter (where bypass) as bypass_teams
    from {{ ref('int_unattributed_gpu_hours') }}
    where day between {{ var('day_from') }} and {{ var('day_to') }}
    group by day

),

unmatched as (

    select
        u.day,
        count(distinct u.job_key) as unmatched_jobs,
        count(distinct u.job_key) filter (where u.kind = 'unknown_request') as unmatched_unknown_request_jobs,
        count(distinct u.job_key) filter (where u.kind = 'ended_request') as unmatched_ended_request_jobs
    from {{ ref('stg_cluster_unmatched') }} as u
    inner join days as d on u.day = d.day
    group by u.day

),

approvals as (

    select
        d.day,
        count(*) as approved_exceptions,
        count(*) filter (where e.approval_kind = 'safety') as safety_approvals,
        count(*) filter (where e.approval_kind = 'cost') as cost_exceptions,
        count(distinct e.approver) as approvers
    from {{ ref('stg_request_events') }} as e
    inner join days as d on e.event_at >= d.day_start and e.event_at < d.day_end
    where e.event = 'approved' and coalesce(e.approval_kind, '') <> 'retrospective'
    group by d.day

),

break_glass as (

    select
        d.day,
        count(*) filter (where g.event_at >= d.day_start) as break_glass_grants,
        count(*) filter (
            where not exists (
                select 1 from {{ ref('stg_request_events') }} as r
                where r.request_id = g.request_id and r.event = 'approved'
                    and r.approval_kind = 'retrospective' and r.event_at >= g.event_at and r.event_at < d.day_end
            )
        ) as break_glass_unreviewed
    from {{ ref('stg_request_events') }} as g
    inner join days as d on g.event_at < d.day_end
    where g.event = 'approved' and g.approval_kind = 'incident'
    group by d.day

),

retrospectives as (

    select d.day, count(*) as retrospectives_done
    from {{ ref('stg_request_events') }} as e
    inner join days as d on e.event_at >= d.day_start and e.event_at < d.day_end
    where e.event = 'approved' and e.approval_kind = 'retrospective'
    group by d.day

),

final as (

    select
        d.day,
        coalesce(a.gpu_hours, 0.0) as attributed_gpu_hours,
        coalesce(u.gpu_hours, 0.0) as unattributed_gpu_hours,
        coalesce(u.pods, 0) as unattributed_pods,
        coalesce(u.owned_gpu_hours, 0.0) as charged_bypass_gpu_hours,
        coalesce(u.unowned_gpu_hours, 0.0) as unowned_gpu_hours,
        u.bypass_teams,
        coalesce(u.gpu_hours, 0.0) / nullif(coalesce(a.gpu_hours, 0.0) + coalesce(u.gpu_hours, 0.0), 0) as bypass_share,
        coalesce(m.unmatched_jobs, 0) as unmatched_jobs,
        coalesce(m.unmatched_unknown_request_jobs, 0) as unmatched_unknown_request_jobs,
        coalesce(m.unmatched_ended_request_jobs, 0) as unmatched_ended_request_jobs,
        coalesce(x.approved_exceptions, 0) as approved_exceptions,
        coalesce(x.safety_approvals, 0) as safety_approvals,
        coalesce(x.cost_exceptions, 0) as cost_exceptions,
        coalesce(x.approvers, 0) as approvers,
        coalesce(g.break_glass_grants, 0) as break_glass_grants,
        coalesce(g.break_glass_unreviewed, 0) as break_glass_unreviewed,
        coalesce(r.retrospectives_done, 0) as retrospectives_done
    from days as d
    left join attributed as a on a.day = d.day
    left join unattributed as u on u.day = d.day
    left join unmatched as m on m.day = d.day
    left join approvals as x on x.day = d.day
    left join break_glass as g on g.day = d.day
    left join retrospectives as r on r.day = d.day

)

select * from final
