-- Cost per accepted label of each label batch over its lifetime (every day, every attempt).
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
            as cost_per_accepted_label,
        -- why there is no cost per accepted label (NULL when there is one)
        case
            when r.accepted_labels is null and r.state in ('failed', 'rejected')
                then 'batch ' || r.state || ': no review result (accepted labels) recorded, its cost buys no label'
            when r.accepted_labels is null and r.state <> 'finished'
                then 'batch ' || r.state || ': no review result (accepted labels) recorded yet'
            when r.accepted_labels is null then 'no review result (accepted labels) recorded for this batch'
            when r.accepted_labels = 0 then 'review accepted no label of this batch: its cost buys no accepted label'
        end as reason
    from requests as r
    inner join cost as c on c.request_id = r.request_id

)

select * from final
