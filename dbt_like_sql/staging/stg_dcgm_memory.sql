-- Framebuffer use and XID errors per GPU (or MIG instance) and pod and day, from the DCGM samples:
-- the right-sizing signal's memory side. Blank sentinels (~2^63) and NaN are dropped.
with source as (

    select * from {{ source('raw_dcgm_samples') }}
    where {{ dcgm_sample_filter(['DCGM_FI_DEV_FB_USED', 'DCGM_FI_DEV_XID_ERRORS']) }}

),

final as (

    select
        {{ dcgm_key('ts') }},
        max(value) filter (where metric = 'DCGM_FI_DEV_FB_USED') as fb_used_max_mib,
        count(*) filter (where metric = 'DCGM_FI_DEV_FB_USED') as fb_samples,
        -- DCGM_FI_DEV_XID_ERRORS holds the last XID seen (0: none)
        max(value) filter (where metric = 'DCGM_FI_DEV_XID_ERRORS') as xid_last,
        count(*) filter (where metric = 'DCGM_FI_DEV_XID_ERRORS' and value > 0) as xid_samples
    from source
    group by all

)

select * from final
