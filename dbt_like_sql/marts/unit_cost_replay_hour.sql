-- Cost per replayed log hour of each replay request (all attempts).
with requests as (

    select * from {{ ref('stg_requests') }}
    where workload = 'replay'

),

cost as (

    select * from {{ ref('int_request_cost') }}

),

final as (

    select
        r.request_id,
        r.team,
        r.cost_center,
        r.lane,
        r.release_packet_id,
        r.odd_cell,
        r.state,
        c.currency,
        c.first_day,
        c.last_day,
        c.attempts,
        r.replay_hours,
        c.cost,
        cast(round(cast(c.cost as double) / nullif(r.replay_hours, 0), 6) as decimal(18, 6)) as cost_per_replay_hour
    from requests as r
    inner join cost as c on c.request_id = r.request_id

)

select * from final
