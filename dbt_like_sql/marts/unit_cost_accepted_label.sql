-- Cost per accepted label of each label batch (all attempts).
with requests as (

    select * from {{ ref('stg_requests') }}
    where workload = 'label_batch'

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
        r.state,
        c.currency,
        c.first_day,
        c.last_day,
        c.attempts,
        r.accepted_labels,
        r.rejected_labels,
        c.cost,
        cast(round(cast(c.cost as double) / nullif(r.accepted_labels, 0), 6) as decimal(18, 6))
            as cost_per_accepted_label
    from requests as r
    inner join cost as c on c.request_id = r.request_id

)

select * from final
