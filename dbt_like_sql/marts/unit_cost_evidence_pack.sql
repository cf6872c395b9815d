-- Cost of each evidence pack request (all attempts): the unit is one pack.
with requests as (

    select * from {{ ref('stg_requests') }}
    where workload = 'evidence_pack'

),

cost as (

    select * from {{ ref('int_request_cost') }}

),

final as (

    select
        r.request_id,
        r.team,
        r.cost_center,
        r.release_packet_id,
        r.odd_cell,
        r.state,
        c.currency,
        c.first_day,
        c.last_day,
        c.attempts,
        c.cost as cost_per_evidence_pack
    from requests as r
    inner join cost as c on c.request_id = r.request_id

)

select * from final
