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
            and lower(coalesce(exit_status, '')) not in ('succeeded', 'completed') as failed,
        coalesce(gpu_resource, 'nvidia.com/gpu') as gpu_resource,
        -- the share of one GPU a unit is priced at (the admitted flavor's, from the policy); without
        -- it a MIG slice counts its compute slices / 7 (1g.10gb: 1/7) and anything else one GPU
        coalesce(
            gpu_share,
            case when gpu_resource like 'nvidia.com/mig-%'
                 then try_cast(regexp_extract(gpu_resource, 'mig-([1-7])g\.', 1) as integer) / 7.0 end,
            1.0
        ) as gpu_share
    from source

)

select * from final
