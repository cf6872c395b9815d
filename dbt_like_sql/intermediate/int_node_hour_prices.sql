-- Price per GPU-hour per node and day: billed node cost / (GPUs x billed hours), or the price book.
with nodes as (

    select * from {{ ref('int_gpu_nodes') }}
    where day between {{ var('day_from') }} and {{ var('day_to') }}

),

billing as (

    select b.*
    from {{ ref('stg_focus_billing') }} as b
    semi join nodes as n on n.day = b.day and n.hostname = b.resource_id
    where b.day between {{ var('day_from') }} and {{ var('day_to') }}

),

node_cost as (

    select
        day,
        resource_id as hostname,
        currency,
        sum(billed_cost) as node_cost
    from billing
    group by day, resource_id, currency

),

node_hours as (

    -- several rows (instance, disk, ...) can share one charge period: count each period once
    select
        day,
        resource_id as hostname,
        currency,
        sum(epoch(charge_period_end - charge_period_start)) / 3600.0 as billed_hours
    from (select distinct day, resource_id, currency, charge_period_start, charge_period_end from billing)
    group by day, resource_id, currency

),

billed as (

    select
        n.day,
        n.hostname,
        n.gpus,
        n.model_name,
        h.billed_hours as node_hours,
        c.node_cost,
        c.currency,
        'billing' as price_source,
        cast(null as varchar) as price_book_source,
        cast(null as varchar) as price_book_as_of
    from nodes as n
    inner join node_cost as c on c.day = n.day and c.hostname = n.hostname
    inner join node_hours as h on h.day = c.day and h.hostname = c.hostname and h.currency = c.currency

),

book as (

    select
        *,
        cast(price_per_gpu_hour as decimal(18, 6)) as book_price
    from {{ ref('price_book') }}

),

unbilled as (

    select
        n.*,
        b.book_price,
        b.currency,
        b.source,
        b.as_of
    from nodes as n
    inner join book as b on n.model_name ilike b.model_pattern
    anti join node_cost as c on c.day = n.day and c.hostname = n.hostname
    qualify row_number() over (partition by n.day, n.hostname order by b.priority) = 1

),

fallback as (

    select
        day,
        hostname,
        gpus,
        model_name,
        cast({{ var('fallback_node_hours') }} as double) as node_hours,
        cast(book_price * gpus * cast({{ var('fallback_node_hours') }} as integer) as decimal(18, 6)) as node_cost,
        currency,
        'price_book' as price_source,
        source as price_book_source,
        as_of as price_book_as_of
    from unbilled

),

priced as (

    select * from billed
    union all
    select * from fallback

),

final as (

    select
        day,
        hostname,
        gpus,
        model_name,
        node_hours,
        gpus * node_hours as capacity_gpu_hours,
        node_cost,
        currency,
        cast(round(cast(node_cost as double) / nullif(gpus * node_hours, 0), 6) as decimal(18, 6))
            as price_per_gpu_hour,
        price_source,
        price_book_source,
        price_book_as_of
    from priced

)

select * from final
