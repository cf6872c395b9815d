-- Cost of each released map: its own request plus the map segmentation requests of its release packet.
with requests as (

    select * from {{ ref('stg_requests') }}

),

released as (

    select * from requests
    where workload = 'released_map' and state = 'finished'

),

lineage as (

    select distinct rel.request_id as released_request_id, r.request_id
    from released as rel
    inner join requests as r
        on r.request_id = rel.request_id
        or (rel.release_packet_id is not null and r.release_packet_id = rel.release_packet_id
            and r.workload in ('map_segmentation', 'released_map'))

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
        count(distinct l.request_id) as lineage_requests,
        sum(c.allocated_gpu_hours) as allocated_gpu_hours,
        sum(c.cost) as cost_per_released_map
    from released as rel
    inner join lineage as l on l.released_request_id = rel.request_id
    inner join cost as c on c.request_id = l.request_id
    group by all

)

select * from final
