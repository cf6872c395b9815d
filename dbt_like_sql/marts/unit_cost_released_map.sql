-- Cost of each released map: every request of its recorded lineage tree, each once; without recorded
-- lineage, itself plus the map segmentation requests of its release packet.
with requests as (

    select * from {{ ref('stg_requests') }}

),

released as (

    select * from requests
    where workload = 'released_map' and state = 'finished'

),

tree as (

    select * from {{ ref('int_request_lineage') }}

),

recorded as (

    select rel.request_id as released_request_id, t.ancestor_request_id as request_id, 'lineage' as lineage_source
    from released as rel
    inner join tree as t on t.request_id = rel.request_id
    where rel.request_id in (select request_id from tree where depth > 0)

),

shared_ids as (

    select distinct rel.request_id as released_request_id, r.request_id, 'shared_ids' as lineage_source
    from released as rel
    inner join requests as r
        on r.request_id = rel.request_id
        or (rel.release_packet_id is not null and r.release_packet_id = rel.release_packet_id
            and r.workload in ('map_segmentation', 'released_map'))
    where rel.request_id not in (select request_id from tree where depth > 0)

),

lineage as (

    select * from recorded
    union all
    select * from shared_ids

),

cost as (

    select * from {{ ref('int_request_cost') }}

),

final as (

    select
        rel.request_id,
        rel.team,
        rel.cost_center,
        rel.release_packet_id,
        c.currency,
        min(l.lineage_source) as lineage_source,
        count(distinct l.request_id) as lineage_requests,
        sum(c.allocated_gpu_hours) as allocated_gpu_hours,
        sum(c.cost) as cost_per_released_map
    from released as rel
    inner join lineage as l on l.released_request_id = rel.request_id
    inner join cost as c on c.request_id = l.request_id
    group by all

)

select * from final
