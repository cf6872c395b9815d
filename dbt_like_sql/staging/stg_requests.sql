-- The request ledger's latest snapshot: one row per request.
with source as (

    select * from {{ source('raw_requests') }}

),

final as (

    select
        request_id,
        team,
        cost_center,
        lane,
        coalesce(site, 'unknown') as site,
        odd_cell,
        lower(workload) as workload,
        gpu_type,
        gpu_count,
        submitted_at,
        lower(state) as state,
        coalesce(attempts, 0) as attempts,
        release_packet_id,
        candidate_id,
        incident_id,
        output_artifact_ids,
        accepted_labels,
        rejected_labels,
        replay_hours,
        -- what gpu_count counts, as the device plugin names it (NULL in older snapshots: whole GPUs)
        coalesce(gpu_resource, 'nvidia.com/gpu') as gpu_resource,
        -- a service request's service (the `service` label of its request counts); NULL otherwise
        service_name
    from source

)

select * from final
