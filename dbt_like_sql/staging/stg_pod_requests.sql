-- Pods the platform launched, keyed by (namespace, pod): the join between DCGM samples and requests.
with source as (

    select * from {{ source('raw_pod_requests') }}

),

final as (

    select
        namespace,
        pod,
        request_id,
        attempt,
        flavor_name,
        lower(hostname) as hostname,
        gpu_uuids,
        len(gpu_uuids) as assigned_gpus,
        started_at,
        ended_at,
        lower(coalesce(exit_status, 'running')) as exit_status,
        ended_at is not null
            and lower(coalesce(exit_status, '')) not in ('succeeded', 'completed') as failed
    from source

)

select * from final
