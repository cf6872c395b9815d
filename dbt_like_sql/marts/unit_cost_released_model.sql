-- Cost of each released model: its own request plus every request of its candidate (training
-- runs and their failed retries) and of its release packet (replays, evidence packs), each once.
with requests as (

    select * from {{ ref('stg_requests') }}

),

released as (

    select * from requests
    where workload = 'released_model' and state = 'finished'

),

lineage as (

    select distinct rel.request_id as released_request_id, r.request_id
    from released as rel
    inner join requests as r
        on r.request_id = rel.request_id
        or (rel.candidate_id is not null and r.candidate_id = rel.candidate_id)
        or (rel.release_packet_id is not null and r.release_packet_id = rel.release_packet_id)

),

cost as (

    select * from {{ ref('int_request_cost') }}

),

final as (

    select
        rel.request_id,
        rel.team,
        rel.cost_center,
        rel.candidate_id,
        rel.release_packet_id,
        c.currency,
        count(distinct l.request_id) as lineage_requests,
        sum(c.allocated_gpu_hours) as allocated_gpu_hours,
        sum(c.cost) as cost_per_released_model
    from released as rel
    inner join lineage as l on l.released_request_id = rel.request_id
    inner join cost as c on c.request_id = l.request_id
    group by all

)

select * from final
