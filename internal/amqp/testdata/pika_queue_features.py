#!/usr/bin/env python3
# pika against Keel's queue features: message priorities (x-max-priority),
# single active consumer, consumer priorities (x-priority), x-delivery-count
# on quorum queues, x-max-length-bytes and x-overflow=reject-publish-dlx.
# AMQP_HOST and AMQP_PORT say where the broker is. Prints "ok" and exits 0,
# or raises.
import os
import time

import pika

params = pika.ConnectionParameters(host=os.environ['AMQP_HOST'], port=int(os.environ['AMQP_PORT']))
conn = pika.BlockingConnection(params)
ch = conn.channel()
ch.confirm_delivery()


def get_within(channel, queue, seconds=10, auto_ack=True):
    deadline = time.time() + seconds
    while time.time() < deadline:
        method, props, body = channel.basic_get(queue=queue, auto_ack=auto_ack)
        if method is not None:
            return method, props, body
        time.sleep(0.01)
    raise AssertionError('nothing in %s after %ds' % (queue, seconds))


def publish(queue, body, **props):
    ch.basic_publish(exchange='', routing_key=queue, body=body,
                     properties=pika.BasicProperties(delivery_mode=2, **props))


# Priorities: highest first, publish order among equals, above the
# maximum counts as the maximum.
ch.queue_declare(queue='p-jobs', durable=True, arguments={'x-max-priority': 10})
for body, prio in [(b'low', 1), (b'none', None), (b'top', 200), (b'mid', 5), (b'mid2', 5), (b'high', 10)]:
    publish('p-jobs', body, priority=prio)
got = [get_within(ch, 'p-jobs')[2] for _ in range(6)]
assert got == [b'top', b'high', b'mid', b'mid2', b'low', b'none'], got

# Single active consumer: the second consumer gets nothing until the first
# cancels.
ch.queue_declare(queue='p-sac', durable=True, arguments={'x-single-active-consumer': True})
received = []
ch2 = conn.channel()
ch.basic_consume(queue='p-sac', consumer_tag='first', auto_ack=True,
                 on_message_callback=lambda c, m, p, b: received.append(('first', b)))
ch2.basic_consume(queue='p-sac', consumer_tag='second', auto_ack=True,
                  on_message_callback=lambda c, m, p, b: received.append(('second', b)))
publish('p-sac', b'1')
publish('p-sac', b'2')
deadline = time.time() + 10
while len(received) < 2 and time.time() < deadline:
    conn.process_data_events(time_limit=0.05)
assert received == [('first', b'1'), ('first', b'2')], received
ch.basic_cancel('first')
publish('p-sac', b'3')
deadline = time.time() + 10
while len(received) < 3 and time.time() < deadline:
    conn.process_data_events(time_limit=0.05)
assert received[2:] == [('second', b'3')], received
ch2.basic_cancel('second')

# Consumer priorities: the x-priority 10 consumer gets the messages while
# it has room.
ch.queue_declare(queue='p-cprio', durable=True)
got = []
ch3 = conn.channel()
ch3.basic_qos(prefetch_count=10)
ch3.basic_consume(queue='p-cprio', consumer_tag='low', on_message_callback=lambda c, m, p, b: got.append(('low', b)))
ch3.basic_consume(queue='p-cprio', consumer_tag='high', arguments={'x-priority': 10},
                  on_message_callback=lambda c, m, p, b: got.append(('high', b)))
for i in range(3):
    publish('p-cprio', b'%d' % i)
deadline = time.time() + 10
while len(got) < 3 and time.time() < deadline:
    conn.process_data_events(time_limit=0.05)
assert got == [('high', b'0'), ('high', b'1'), ('high', b'2')], got
ch3.close()

# x-delivery-count on a quorum queue's redeliveries.
ch.queue_declare(queue='p-quorum', durable=True, arguments={'x-queue-type': 'quorum'})
publish('p-quorum', b'again')
counts = []
for _ in range(3):
    method, props, body = get_within(ch, 'p-quorum', auto_ack=False)
    counts.append((props.headers or {}).get('x-delivery-count'))
    ch.basic_nack(delivery_tag=method.delivery_tag, requeue=True)
assert counts == [None, 1, 2], counts
get_within(ch, 'p-quorum')

# x-max-length-bytes with reject-publish-dlx: the refused message is
# nacked (pika raises NackError) and dead-lettered.
ch.exchange_declare(exchange='p-dlx', exchange_type='fanout', durable=True)
ch.queue_declare(queue='p-dead', durable=True)
ch.queue_bind(queue='p-dead', exchange='p-dlx')
ch.queue_declare(queue='p-bytes', durable=True, arguments={
    'x-max-length-bytes': 8, 'x-overflow': 'reject-publish-dlx', 'x-dead-letter-exchange': 'p-dlx'})
publish('p-bytes', b'12345678')
try:
    publish('p-bytes', b'9')
    raise AssertionError('a publish over x-max-length-bytes was confirmed')
except pika.exceptions.NackError:
    pass
_, props, body = get_within(ch, 'p-dead')
assert body == b'9' and props.headers['x-death'][0]['reason'] == 'maxlen', (body, props.headers)

conn.close()
print('ok')
