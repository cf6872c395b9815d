-- Jobs on the cluster the ledger cannot match (raw_cluster_unmatched): one row per recorded
-- observation, with the UTC day it was observed on.
with source as (

    select * from {{ source('raw_cluster_unmatched') }}

),

final as (

    select
        observed_at,
        cast(observed_at as date) as day,
        namespace,
        job,
        namespace || '/' || job as job_key,
        request_id,
        attempt,
        lower(kind) as kind,
        why,
        condition,
        status,
        kueue_reason,
        flavor
    from source

)

select * from final
