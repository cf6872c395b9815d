-- The request ledger's latest snapshot: one row per request.
with source as (

    select * from {{ source('raw_requests') }}

),

team_aliases as (

    -- a renamed team's former names (policy teams.<team>.aliases, bound as alias|team): a request
    -- recorded under one is the team's
    select split_part(a, '|', 1) as alias_name, split_part(a, '|', 2) as current_team
    from unnest(cast({{ var('team_aliases') }} as varchar[])) as u(a)

),

final as (

    select
        request_id,
        coalesce(ta.current_team, s.team) as team,
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
    from source as s
    left join team_aliases as ta on ta.alias_name = s.team

)

select * from final
