-- Cache efficiency per day by image and workload: image pull and setup time as a share of run time,
-- from the timings the executor or program reported for each run (stg_workload_runs). A day or
-- image without timings keeps its row with NULL shares and the reason.
with days as (

    select day from {{ ref('int_build_days') }}
    where list_contains(cast({{ var('scorecard_rows') }} as varchar[]), 'cache_efficiency')

),

runs as (

    select
        cast(w.recorded_at as date) as day,
        coalesce(w.container_digest, '(unknown)') as image,
        w.kind,
        w.image_pull_s,
        w.setup_s,
        w.runtime_s,
        w.runtime_s > 0 and (w.image_pull_s is not null or w.setup_s is not null) as timed
    from {{ ref('stg_workload_runs') }} as w
    inner join days as d on d.day = cast(w.recorded_at as date)

),

long as (

    select day, 'image' as dimension, image as subject, true as is_run, image_pull_s, setup_s, runtime_s, timed
    from runs
    union all
    select day, 'workload', kind, true, image_pull_s, setup_s, runtime_s, timed from runs
    union all
    select day, 'all', 'all', true, image_pull_s, setup_s, runtime_s, timed from runs
    union all
    -- every built day has its 'all' row, runs or not
    select day, 'all', 'all', false, null, null, null, false from days

),

final as (

    select
        day,
        dimension,
        subject,
        count(*) filter (where is_run) as runs,
        count(*) filter (where timed) as timed_runs,
        sum(coalesce(image_pull_s, 0)) filter (where timed) as image_pull_s,
        sum(coalesce(setup_s, 0)) filter (where timed) as setup_s,
        sum(runtime_s) filter (where timed) as runtime_s,
        sum(coalesce(image_pull_s, 0) + coalesce(setup_s, 0)) filter (where timed)
            / nullif(sum(runtime_s) filter (where timed), 0) as pull_setup_share,
        case when count(*) filter (where timed) = 0 then
            'no image pull / setup timings recorded: runs report none in results (image_pull_s, setup_s, '
            || 'runtime_s) and the pod inventory keeps no container start times'
        end as missing_reason
    from long
    group by day, dimension, subject

)

select * from final
