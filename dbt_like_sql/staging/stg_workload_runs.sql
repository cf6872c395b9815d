-- Recorded workload runs (raw_workload_runs): outcome, exit code and what the program reported,
-- with the timings and failure reason the scorecards read pulled out of its results JSON.
with source as (

    select * from {{ source('raw_workload_runs') }}

),

parsed as (

    select
        *,
        try_cast(json_extract_string(results, '$.image_pull_s') as double) as image_pull_s,
        try_cast(json_extract_string(results, '$.setup_s') as double) as setup_s,
        try_cast(json_extract_string(results, '$.runtime_s') as double) as runtime_s,
        coalesce(json_extract_string(results, '$.error'), json_extract_string(results, '$.reason')) as reported_reason
    from source

),

final as (

    select
        request_id,
        seq,
        kind,
        lower(status) as status,
        exit_status,
        attempts,
        container_digest,
        coalesce(dataset_ids, []) as dataset_ids,
        results,
        recorded_at,
        image_pull_s,
        setup_s,
        runtime_s,
        reported_reason,
        -- the OOM rule (docs/scorecards.md): a failed run killed by SIGKILL (exit 137: the kernel's
        -- or the container's OOM killer), or whose program reported running out of (GPU) memory
        lower(status) = 'failed' and (
            exit_status = 137
            or regexp_matches(coalesce(reported_reason, ''), '(?i)out of memory|oomkilled|CUBLAS_STATUS_ALLOC_FAILED')
        ) as oom
    from parsed

)

select * from final
