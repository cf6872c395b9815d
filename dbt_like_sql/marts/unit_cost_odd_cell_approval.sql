-- Cost per ODD-cell approval: replay + evidence-pack cost of one cell in one release packet,
-- divided by the finished evidence packs (approvals) for that cell. Each row is one cell's own
-- figure; a headline over several cells divides the approved cells' cost by their approvals
-- (cost report: a cell with no approval yet adds its cost to no approval's).
with requests as (

    select * from {{ ref('stg_requests') }}
    where workload in ('replay', 'evidence_pack')
      and release_packet_id is not null
      and odd_cell is not null

),

cost as (

    select * from {{ ref('int_request_cost') }}

),

cells as (

    select
        r.release_packet_id,
        r.odd_cell,
        c.currency,
        count(distinct r.request_id) as requests,
        min(c.first_day) as first_day,
        max(c.last_day) as last_day,
        sum(c.cost) as cost
    from requests as r
    inner join cost as c on c.request_id = r.request_id
    group by r.release_packet_id, r.odd_cell, c.currency

),

approvals as (

    select
        release_packet_id,
        odd_cell,
        count(*) as packs,
        count(*) filter (where state = 'finished') as approvals
    from requests
    where workload = 'evidence_pack'
    group by release_packet_id, odd_cell

),

final as (

    select
        c.release_packet_id,
        c.odd_cell,
        c.currency,
        c.first_day,
        c.last_day,
        c.requests,
        coalesce(a.approvals, 0) as approvals,
        c.cost,
        {{ cost_per('a.approvals') }} as cost_per_approval,
        -- why there is no cost per approval (NULL when there is one)
        case
            when a.packs is null
                then 'no evidence pack for this cell yet: its replays are paid for, nothing is approved so far'
            when a.approvals = 0
                then 'no finished evidence pack for this cell yet (' || cast(a.packs as varchar) || ' submitted)'
        end as reason
    from cells as c
    left join approvals as a on a.release_packet_id = c.release_packet_id and a.odd_cell = c.odd_cell

)

select * from final
