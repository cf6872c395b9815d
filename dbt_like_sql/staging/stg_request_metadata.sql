-- Request fields the scorecards group or judge by (raw_request_metadata), with the sharing mode
-- and profile the request's gpu_resource names.
with source as (

    select * from {{ source('raw_request_metadata') }}

),

final as (

    select
        request_id,
        nullif(owner, '') as owner,
        image,
        container_digest,
        coalesce(dataset_ids, []) as dataset_ids,
        coalesce(gpu_resource, 'nvidia.com/gpu') as gpu_resource,
        case
            when coalesce(gpu_resource, 'nvidia.com/gpu') = 'nvidia.com/gpu' then 'exclusive'
            when gpu_resource like 'nvidia.com/mig-%' then 'mig'
            when gpu_resource = 'nvidia.com/gpu.shared' then 'shared'
            else 'other'
        end as sharing_mode,
        case
            when coalesce(gpu_resource, 'nvidia.com/gpu') = 'nvidia.com/gpu' then 'whole'
            when gpu_resource like 'nvidia.com/mig-%' then substr(gpu_resource, length('nvidia.com/mig-') + 1)
            when gpu_resource = 'nvidia.com/gpu.shared' then 'replica'
            else gpu_resource
        end as profile,
        preemption_policy,
        checkpoint_interval_s,
        expected_duration_s
    from source

)

select * from final
