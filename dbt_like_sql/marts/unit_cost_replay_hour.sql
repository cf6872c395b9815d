-- Cost per replayed log hour of each replay request over its lifetime (every day, every attempt).
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
        cast(round(cast(c.cost as double) / nullif(r.replay_hours, 0), 6) as decimal(18, 6)) as cost_per_replay_hour,
        -- why there is no cost per replay hour (NULL when there is one)
        case
            when r.replay_hours is null and r.state in ('failed', 'rejected')
                then 'replay ' || r.state || ': no replayed hours recorded, its cost buys no replay hour'
            when r.replay_hours is null and r.state <> 'finished'
                then 'replay ' || r.state || ': no replayed hours recorded yet'
            when r.replay_hours is null then 'no replayed log hours recorded for this replay'
            when r.replay_hours = 0 then 'the replay replayed 0 log hours: its cost buys no replay hour'
        end as reason
    from requests as r
    inner join cost as c on c.request_id = r.request_id

)

select * from final
