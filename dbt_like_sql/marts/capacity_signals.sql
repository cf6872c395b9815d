-- The capacity-planning table, computed: one row per day, signal and subject with its value, the
-- policy's threshold (bound vars cs_*), whether it fired, its severity and the action to take.
-- Signals off at the policy's scale (enabled_signals) are left out; severity is ERROR for the
-- scale's error_lanes / error_signals, else WARN.
with days as (

    select * from {{ ref('int_build_days') }}

),

flavors as (

    select split_part(f, '|', 1) as flavor_name, split_part(f, '|', 2) as node_pool,
           split_part(f, '|', 3) as flavor_mode, split_part(f, '|', 4) = 'true' as spot
    from unnest(cast({{ var('flavor_catalog') }} as varchar[])) as t(f)

),

queue_wait as (

    select
        q.day, 'queue_wait_exceeds_training_time' as signal, q.subject, q.subject as lane,
        q.wait_p95_s / q.run_p50_s as value,
        cast({{ var('cs_queue_wait_ratio') }} as double) as threshold,
        q.admissions >= {{ var('cs_min_attempts') }} and q.wait_p95_s / q.run_p50_s > {{ var('cs_queue_wait_ratio') }}
            as fired,
        printf('Lane %s: p95 queue wait %.0f s against a median run of %.0f s (x%.2f; fires above x%.2f). When it '
               || 'waits longer than its jobs run, add nominal_quota or borrowing_limit for it, lend it idle quota from its '
               || 'cohort, or move work to an emptier lane or off-peak.',
               q.subject, q.wait_p95_s, q.run_p50_s, q.wait_p95_s / q.run_p50_s, {{ var('cs_queue_wait_ratio') }})
            as action
    from {{ ref('scorecard_queue_wait') }} as q
    where q.day between {{ var('day_from') }} and {{ var('day_to') }}
      and q.dimension = 'lane' and q.run_p50_s > 0 and q.wait_p95_s is not null

),

pool_utilization as (

    select
        u.day, 'pool_utilization_low', u.subject, cast(null as varchar),
        u.busy_of_capacity,
        cast({{ var('cs_pool_utilization_min') }} as double),
        u.busy_of_capacity < {{ var('cs_pool_utilization_min') }},
        printf('Node pool %s did work on %.0f%% of its GPU-hours (%.1f busy of %.1f; fires below %.0f%%). Shrink it '
               || '(autoscaling.node_pools.%s.min_nodes), consolidate onto fewer nodes, or cut its GPUs into MIG '
               || 'slices for the small jobs holding whole GPUs.',
               u.subject, 100 * u.busy_of_capacity, u.used_gpu_hours, u.capacity_gpu_hours,
               100 * {{ var('cs_pool_utilization_min') }}, u.subject)
    from {{ ref('scorecard_utilization') }} as u
    where u.day between {{ var('day_from') }} and {{ var('day_to') }}
      and u.dimension = 'node_pool' and u.capacity_gpu_hours > 0
      -- nodes no flavor or inventory label places in a pool have nothing to resize (scorecard only)
      and u.subject <> 'unknown'

),

oom as (

    select
        f.day, 'oom_retries_high', f.subject, f.subject,
        f.oom_retry_rate,
        cast({{ var('cs_oom_retry_rate_max') }} as double),
        f.attempts >= {{ var('cs_min_attempts') }} and f.oom_retry_rate > {{ var('cs_oom_retry_rate_max') }},
        printf('Lane %s: %d of %d attempts ran out of memory and were retried (%.0f%%; fires above %.0f%%). Raise the jobs'' '
               || 'memory (memory_gib, a larger GPU flavor) or their batch size down, and fail OOM fast instead of '
               || 'retrying it unchanged.',
               f.subject, f.oom_retries, f.attempts, 100 * f.oom_retry_rate, 100 * {{ var('cs_oom_retry_rate_max') }})
    from {{ ref('scorecard_failures') }} as f
    where f.day between {{ var('day_from') }} and {{ var('day_to') }}
      and f.dimension = 'lane' and f.oom_retry_rate is not null

),

waits_by_day as (

    -- waits touching each day, with what they had waited by its end; upstream and budget waits
    -- do not wait for capacity
    select d.day, w.*,
           epoch(least(w.wait_end, d.day_end) - w.wait_start) as waited_s,
           least(w.wait_end, d.day_end) as until
    from {{ ref('int_queue_waits') }} as w
    inner join days as d on w.wait_start < d.day_end and w.wait_end >= d.day_start
    where coalesce(w.last_reason_code, '') not in ('WaitingForUpstream', 'BudgetExhausted')

),

research_pods as (

    select p.started_at, coalesce(p.ended_at, timestamp '9999-12-31') as ended_at, p.flavor_name
    from {{ ref('stg_pod_requests') }} as p
    inner join {{ ref('stg_requests') }} as r on r.request_id = p.request_id
    where r.lane = {{ var('cs_research_lane') }}

),

release_delays as (

    select w.day, w.request_id, w.waited_s
    from waits_by_day as w
    where w.lane = {{ var('cs_release_lane') }}
      and exists (select 1 from research_pods as p where p.started_at < w.until and p.ended_at > w.wait_start)

),

release_delay as (

    select
        d.day, 'release_replay_delayed_by_research', {{ var('cs_release_lane') }}, {{ var('cs_release_lane') }},
        coalesce(max(r.waited_s), 0.0),
        cast({{ var('cs_release_delay_s') }} as double),
        coalesce(max(r.waited_s), 0.0) > {{ var('cs_release_delay_s') }},
        printf('%s waited up to %.0f s (fires above %.0f s) while %s held GPUs (%d request(s), longest %s). Let %s reclaim '
               || 'them (preemption.reclaim_within_cohort: Any, %s in yields_to), cap %s''s borrowing_limit, or keep '
               || 'a warm pool for %s.',
               {{ var('cs_release_lane') }}, coalesce(max(r.waited_s), 0.0), {{ var('cs_release_delay_s') }},
               {{ var('cs_research_lane') }}, count(r.request_id), coalesce(arg_max(r.request_id, r.waited_s), '-'),
               {{ var('cs_release_lane') }}, {{ var('cs_release_lane') }}, {{ var('cs_research_lane') }},
               {{ var('cs_release_lane') }})
    from days as d
    left join release_delays as r on r.day = d.day
    group by d.day

),

incident_wait as (

    select
        d.day, 'incident_waiting_for_capacity', {{ var('cs_incident_lane') }}, {{ var('cs_incident_lane') }},
        coalesce(max(w.waited_s), 0.0),
        cast({{ var('cs_incident_wait_s') }} as double),
        coalesce(max(w.waited_s), 0.0) > {{ var('cs_incident_wait_s') }},
        printf('%s waited up to %.0f s for capacity (fires above %.0f s; longest %s). Keep a warm pool for it '
               || '(autoscaling.warm_pools), raise its nominal_quota, or let it preempt more '
               || '(preemption.within_cluster_queue / reclaim_within_cohort); gpu-platform explain shows what it waited behind.',
               {{ var('cs_incident_lane') }}, coalesce(max(w.waited_s), 0.0), {{ var('cs_incident_wait_s') }},
               coalesce(arg_max(w.request_id, w.waited_s), '-'))
    from days as d
    left join waits_by_day as w on w.day = d.day and w.lane = {{ var('cs_incident_lane') }}
    group by d.day

),

spot as (

    select
        p.day, 'spot_failures_erasing_work', p.subject, cast(null as varchar),
        (p.lost_gpu_hours + p.failed_gpu_hours) / p.ended_gpu_hours,
        cast({{ var('cs_spot_lost_share_max') }} as double),
        p.ended_attempts >= {{ var('cs_min_attempts') }}
            and (p.lost_gpu_hours + p.failed_gpu_hours) / p.ended_gpu_hours > {{ var('cs_spot_lost_share_max') }},
        printf('Spot flavor %s lost %.1f of %.1f GPU-hours to preemptions and failures (%.0f%%; fires above %.0f%%). Keep '
               || 'checkpoint-less work off spot, require preemption_policy checkpoint_requeue with a shorter '
               || 'checkpoint_interval there, or move the lanes that lose most to on-demand.',
               p.subject, p.lost_gpu_hours + p.failed_gpu_hours, p.ended_gpu_hours,
               100 * (p.lost_gpu_hours + p.failed_gpu_hours) / p.ended_gpu_hours, 100 * {{ var('cs_spot_lost_share_max') }})
    from {{ ref('scorecard_preemption') }} as p
    inner join flavors as f on f.flavor_name = p.subject and f.spot
    where p.day between {{ var('day_from') }} and {{ var('day_to') }}
      and p.dimension = 'flavor' and p.ended_gpu_hours > 0

),

site as (

    select
        -- a site's spend is compared within its currency: subject 'site (currency)'
        c.day, 'site_dominating_spend', c.subject || ' (' || c.currency || ')', cast(null as varchar),
        c.spend_share,
        cast({{ var('cs_site_spend_share_max') }} as double),
        -- one site alone is no imbalance: it fires only when the day's spend has more than one site
        c.spend_share > {{ var('cs_site_spend_share_max') }}
            and count(*) over (partition by c.day, c.currency) > 1,
        printf('Site %s took %.0f%% of the day''s %s GPU spend (%s; fires above %.0f%%). Check its work is expected '
               || '(gpu-platform cost report), rebalance capacity between sites, or charge it back explicitly.',
               c.subject, 100 * c.spend_share, c.currency, cast(c.cost as varchar), 100 * {{ var('cs_site_spend_share_max') }})
    from {{ ref('scorecard_allocation_coverage') }} as c
    where c.day between {{ var('day_from') }} and {{ var('day_to') }}
      and c.dimension = 'site' and c.spend_share is not null

),

image_pull as (

    select
        c.day, 'image_pull_dominating_runtime', c.subject, cast(null as varchar),
        c.pull_setup_share,
        cast({{ var('cs_image_pull_share_max') }} as double),
        c.timed_runs >= {{ var('cs_min_attempts') }} and c.pull_setup_share > {{ var('cs_image_pull_share_max') }},
        printf('Image %s spent %.0f%% of its run time pulling and setting up (%.0f of %.0f s over %d run(s); fires above %.0f%%). '
               || 'Pre-pull or cache it on the GPU nodes (a node-local registry mirror, image streaming), slim it, '
               || 'or stage data once per node.',
               c.subject, 100 * c.pull_setup_share, c.image_pull_s + c.setup_s, c.runtime_s, c.timed_runs,
               100 * {{ var('cs_image_pull_share_max') }})
    from {{ ref('scorecard_cache_efficiency') }} as c
    where c.day between {{ var('day_from') }} and {{ var('day_to') }}
      and c.dimension = 'image' and c.pull_setup_share is not null

),

lane_targets as (

    select split_part(t, '|', 1) as lane, cast(split_part(t, '|', 2) as double) as wait_p95_s
    from unnest(cast({{ var('lane_wait_targets') }} as varchar[])) as u(t)

),

wait_target as (

    select
        q.day, 'lane_wait_target_missed', q.subject, q.subject,
        q.wait_p95_s,
        t.wait_p95_s,
        q.admissions >= {{ var('cs_min_attempts') }} and q.wait_p95_s > t.wait_p95_s,
        printf('Lane %s: p95 wait %.0f s over %d admission(s) against its target of %.0f s (lanes.%s.targets.wait_p95). '
               || 'Raise its nominal_quota, let it reclaim or preempt more (reclaim_within_cohort, borrow_within_cohort), '
               || 'keep a warm pool for it, and check a change with gpu-platform simulate --fail-on-missed on a recent trace.',
               q.subject, q.wait_p95_s, q.admissions, t.wait_p95_s, q.subject)
    from {{ ref('scorecard_queue_wait') }} as q
    inner join lane_targets as t on t.lane = q.subject
    where q.day between {{ var('day_from') }} and {{ var('day_to') }}
      and q.dimension = 'lane' and q.wait_p95_s is not null

),

whole_gpu_pods as (

    select p.day, p.request_id, p.namespace, p.pod, p.allocated_gpu_hours, p.used_gpu_hours
    from {{ ref('int_pod_gpu_hours') }} as p
    left join {{ ref('stg_request_metadata') }} as m on m.request_id = p.request_id
    left join flavors as f on f.flavor_name = p.flavor_name
    where p.day between {{ var('day_from') }} and {{ var('day_to') }}
      and coalesce(m.sharing_mode, 'exclusive') = 'exclusive' and coalesce(f.flavor_mode, 'exclusive') = 'exclusive'

),

memory as (

    select day, namespace, pod, max(fb_used_max_mib) as fb_used_max_mib
    from {{ ref('stg_dcgm_memory') }}
    where day between {{ var('day_from') }} and {{ var('day_to') }} and pod is not null and fb_samples > 0
    group by day, namespace, pod

),

right_size as (

    select
        w.day,
        w.request_id,
        max(m.fb_used_max_mib) / 1024.0 as peak_gib,
        sum(w.used_gpu_hours) / nullif(sum(w.allocated_gpu_hours), 0) as engine_active
    from whole_gpu_pods as w
    inner join memory as m on m.day = w.day and m.namespace = w.namespace and m.pod = w.pod
    group by w.day, w.request_id

),

slice as (

    select
        s.day, 'whole_gpu_fits_slice', s.request_id, r.lane,
        s.peak_gib,
        cast({{ var('cs_slice_memory_gib') }} as double),
        s.peak_gib <= {{ var('cs_slice_memory_gib') }}
            and coalesce(s.engine_active, 0) <= {{ var('cs_slice_engine_active_max') }},
        printf('Request %s (lane %s) on whole GPUs peaked at %.1f GiB of GPU memory and kept the engine %.0f%% busy '
               || '(fires at <= %.0f GiB and <= %.0f%%: it fits a MIG slice). Ask for gpu_resource '
               || 'nvidia.com/mig-1g.10gb on a MIG flavor instead of nvidia.com/gpu.',
               s.request_id, r.lane, s.peak_gib, 100 * coalesce(s.engine_active, 0), {{ var('cs_slice_memory_gib') }},
               100 * {{ var('cs_slice_engine_active_max') }})
    from right_size as s
    inner join {{ ref('stg_requests') }} as r on r.request_id = s.request_id

),

fragment_stretches as (

    -- each multi-node wait on fragmented free GPUs, cut at the days being built
    select d.day, f.flavor_name, f.request_id, f.free_gpus,
           greatest(f.waiting_from, d.day_start) as from_at, least(f.waiting_to, d.day_end) as to_at
    from {{ ref('int_fragmented_waits') }} as f
    inner join days as d on f.waiting_from < d.day_end and f.waiting_to > d.day_start

),

fragment_segments as (

    -- the moments any of them starts or ends split a flavor's day into segments
    select day, flavor_name, edge as seg_start, lead(edge) over (partition by day, flavor_name order by edge) as seg_end
    from (select day, flavor_name, from_at as edge from fragment_stretches
          union select day, flavor_name, to_at from fragment_stretches)

),

fragment_hours as (

    -- while several multi-node requests wait on one flavor its free GPUs count once: the most any saw free
    select g.day, g.flavor_name, epoch(g.seg_end - g.seg_start) / 3600.0 * max(f.free_gpus) as gpu_hours
    from fragment_segments as g
    inner join fragment_stretches as f
        on f.day = g.day and f.flavor_name = g.flavor_name and f.from_at <= g.seg_start and f.to_at >= g.seg_end
    where g.seg_end > g.seg_start
    group by g.day, g.flavor_name, g.seg_start, g.seg_end

),

fragment_waits as (

    select day, flavor_name, count(distinct request_id) as requests,
           arg_max(request_id, epoch(to_at - from_at)) as longest
    from fragment_stretches
    group by day, flavor_name

),

fragmentation as (

    select
        w.day, 'gang_blocked_by_fragmentation', w.flavor_name, cast(null as varchar),
        coalesce(sum(h.gpu_hours), 0.0),
        cast({{ var('cs_fragmented_gpu_hours_max') }} as double),
        coalesce(sum(h.gpu_hours), 0.0) > {{ var('cs_fragmented_gpu_hours_max') }},
        printf('Flavor %s: %.1f GPU-hours were free but on no whole nodes while %d multi-node request(s) waited '
               || 'for them (longest %s; fires above %.1f GPU-hours). Pack small jobs onto fewer nodes (best fit, '
               || 'or a preferred kubernetes.io/hostname topology for them) and reserve whole nodes for multi-node '
               || 'jobs (a flavor or warm pool of whole nodes), so free GPUs come as whole nodes.',
               w.flavor_name, cast(coalesce(sum(h.gpu_hours), 0.0) as double), any_value(w.requests),
               any_value(w.longest), cast({{ var('cs_fragmented_gpu_hours_max') }} as double))
    from fragment_waits as w
    left join fragment_hours as h on h.day = w.day and h.flavor_name = w.flavor_name
    group by w.day, w.flavor_name

),

cost_day as (

    -- a day built with more unreconciled money than unreconciled_threshold allows (chargeback's
    -- check unreconciled_within_threshold, severity warn): the day is shown, and flagged here too
    select
        c.day, 'cost_day_over_unreconciled_threshold', c.currency, cast(null as varchar),
        cast(sum(c.unreconciled_cost) as double),
        cast(max(c.unreconciled_limit) as double),
        sum(c.unreconciled_cost) > max(c.unreconciled_limit),
        printf('Day %s: %s %s of the bill is unreconciled, over the limit %s (unreconciled_threshold of the day''s '
               || 'cost). The day is built and flagged; the teams are charged without that money until its exceptions '
               || 'are resolved: see gpu-platform cost report --day %s (exceptions, largest first).',
               cast(c.day as varchar), cast(round(sum(c.unreconciled_cost), 2) as varchar), c.currency,
               cast(round(max(c.unreconciled_limit), 2) as varchar), cast(c.day as varchar))
    from {{ ref('chargeback') }} as c
    where c.day between {{ var('day_from') }} and {{ var('day_to') }} and c.unreconciled_limit is not null
    group by c.day, c.currency

),

signals as (

    select * from queue_wait
    union all select * from pool_utilization
    union all select * from oom
    union all select * from release_delay
    union all select * from incident_wait
    union all select * from spot
    union all select * from site
    union all select * from image_pull
    union all select * from slice
    union all select * from wait_target
    union all select * from fragmentation
    union all select * from cost_day

),

final as (

    select
        day,
        signal,
        subject,
        lane,
        cast(value as double) as value,
        threshold,
        coalesce(fired, false) as fired,
        case when list_contains(cast({{ var('error_signals') }} as varchar[]), signal)
                  or list_contains(cast({{ var('error_lanes') }} as varchar[]), coalesce(lane, ''))
             then 'ERROR' else 'WARN' end as severity,
        action
    from signals
    where list_contains(cast({{ var('enabled_signals') }} as varchar[]), signal)

)

select * from final
