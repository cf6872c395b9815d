-- Kubernetes pods (raw_pods: `kubectl get pods -A -o json` files or the API): the latest
-- observation of each pod, with the request id the k8s executor labels it with.
with source as (

    select * from {{ source('raw_pods') }}

),

latest as (

    select *
    from source
    qualify row_number() over (
        partition by namespace, pod, coalesce(uid, '')
        order by (ended_at is not null) desc, snapshot_at desc, source, source_row
    ) = 1

),

final as (

    select
        namespace,
        pod,
        uid,
        node,
        phase,
        request_id,
        team,
        lane,
        run_id,
        gpu_requests,
        mig_requests,
        cpu_requests,
        memory_requests,
        -- the PersistentVolumeClaims (in the pod's namespace) it mounts
        coalesce(cast(from_json(volume_claims, '["VARCHAR"]') as varchar[]), []) as volume_claims,
        started_at,
        ended_at,
        lower(coalesce(phase, 'unknown')) = 'failed' as failed,
        snapshot_at
    from latest

)

select * from final
