-- Framebuffer use and XID errors per GPU (or MIG instance) and pod and day, from the DCGM samples:
-- the right-sizing signal's memory side. Blank sentinels (~2^63) and NaN are dropped.
with source as (

    select * from {{ source('raw_dcgm_samples') }}
    where ts >= {{ var('day_from') }}::timestamp
      and ts < {{ var('day_to') }}::timestamp + interval 1 day
      and metric in ('DCGM_FI_DEV_FB_USED', 'DCGM_FI_DEV_XID_ERRORS')
      and value is not null and not isnan(value) and value >= 0 and value < 1e15

),

final as (

    select
        cast(ts as date) as day,
        lower(hostname) as hostname,
        gpu,
        coalesce(gpu_instance_id, '') as gpu_instance_id,
        nullif(namespace, '') as namespace,
        nullif(pod, '') as pod,
        max(value) filter (where metric = 'DCGM_FI_DEV_FB_USED') as fb_used_max_mib,
        count(*) filter (where metric = 'DCGM_FI_DEV_FB_USED') as fb_samples,
        -- DCGM_FI_DEV_XID_ERRORS holds the last XID seen (0: none)
        max(value) filter (where metric = 'DCGM_FI_DEV_XID_ERRORS') as xid_last,
        count(*) filter (where metric = 'DCGM_FI_DEV_XID_ERRORS' and value > 0) as xid_samples
    from source
    group by all

)

select * from final
