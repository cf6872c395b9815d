-- PersistentVolumes (raw_volumes: `kubectl get pv -o json` files or the API): the latest
-- observation of each volume, with the claim bound to it and the key of the cloud volume behind it.
with source as (

    select * from {{ source('raw_volumes') }}

),

latest as (

    select *
    from source
    qualify row_number() over (
        partition by volume, coalesce(uid, '') order by snapshot_at desc, source, source_row
    ) = 1

),

final as (

    select
        volume,
        uid,
        phase,
        claim_namespace,
        claim_name,
        storage_class,
        capacity_bytes,
        driver,
        lower(volume_handle) as volume_handle,
        provider,
        volume_key,
        created_at,
        snapshot_at
    from latest

)

select * from final
