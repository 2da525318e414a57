#!/usr/bin/env python3
# pika against Keel's AMQP features: a headers exchange, TTL with
# dead-lettering (x-death as pika reads it), x-overflow=reject-publish
# (a nack pika raises as NackError) and x-delivery-limit. AMQP_HOST and
# AMQP_PORT say where the broker is. Prints "ok" and exits 0, or raises.
import os
import time

import pika

params = pika.ConnectionParameters(host=os.environ['AMQP_HOST'], port=int(os.environ['AMQP_PORT']))
conn = pika.BlockingConnection(params)
ch = conn.channel()
ch.confirm_delivery()


def get_within(queue, seconds=10):
    deadline = time.time() + seconds
    while time.time() < deadline:
        method, props, body = ch.basic_get(queue=queue, auto_ack=True)
        if method is not None:
            return props, body
        time.sleep(0.01)
    raise AssertionError('nothing in %s after %ds' % (queue, seconds))


# Headers exchange: x-match all and any.
ch.exchange_declare(exchange='docs', exchange_type='headers', durable=True)
ch.queue_declare(queue='pdf-reports', durable=True)
ch.queue_declare(queue='any-pdf', durable=True)
ch.queue_bind(queue='pdf-reports', exchange='docs', arguments={'x-match': 'all', 'format': 'pdf', 'type': 'report'})
ch.queue_bind(queue='any-pdf', exchange='docs', arguments={'x-match': 'any', 'format': 'pdf', 'type': 'nothing'})
ch.basic_publish(exchange='docs', routing_key='', body=b'r1',
                 properties=pika.BasicProperties(headers={'format': 'pdf', 'type': 'report'}, delivery_mode=2))
ch.basic_publish(exchange='docs', routing_key='', body=b'l1',
                 properties=pika.BasicProperties(headers={'format': 'pdf', 'type': 'log'}, delivery_mode=2))
assert get_within('pdf-reports')[1] == b'r1'
assert ch.basic_get(queue='pdf-reports', auto_ack=True)[0] is None, 'pdf-reports got the log'
assert sorted([get_within('any-pdf')[1], get_within('any-pdf')[1]]) == [b'l1', b'r1']

# TTL and dead-lettering.
ch.exchange_declare(exchange='graveyard', exchange_type='fanout', durable=True)
ch.queue_declare(queue='graves', durable=True)
ch.queue_bind(queue='graves', exchange='graveyard')
ch.queue_declare(queue='short-lived', durable=True,
                 arguments={'x-message-ttl': 50, 'x-dead-letter-exchange': 'graveyard'})
ch.basic_publish(exchange='', routing_key='short-lived', body=b'gone',
                 properties=pika.BasicProperties(delivery_mode=2))
props, body = get_within('graves')
death = props.headers['x-death'][0]
assert body == b'gone' and death['reason'] == 'expired' and death['queue'] == 'short-lived', props.headers
assert death['count'] == 1, death

# x-overflow=reject-publish: the third publish is nacked.
ch.queue_declare(queue='bounded', durable=True, arguments={'x-max-length': 2, 'x-overflow': 'reject-publish'})
ch.basic_publish(exchange='', routing_key='bounded', body=b'1')
ch.basic_publish(exchange='', routing_key='bounded', body=b'2')
try:
    ch.basic_publish(exchange='', routing_key='bounded', body=b'3')
    raise AssertionError('a publish to a full reject-publish queue was confirmed')
except pika.exceptions.NackError:
    pass

# x-delivery-limit: requeued twice, then dead-lettered.
ch.queue_declare(queue='poison', durable=True,
                 arguments={'x-queue-type': 'quorum', 'x-delivery-limit': 1, 'x-dead-letter-exchange': 'graveyard'})
ch.basic_publish(exchange='', routing_key='poison', body=b'p', properties=pika.BasicProperties(delivery_mode=2))
for attempt in range(2):
    deadline = time.time() + 10
    method = None
    while method is None and time.time() < deadline:
        method, props, body = ch.basic_get(queue='poison', auto_ack=False)
    assert method is not None and method.redelivered == (attempt > 0), (attempt, method)
    ch.basic_nack(method.delivery_tag, requeue=True)
props, body = get_within('graves')
assert body == b'p' and props.headers['x-death'][0]['reason'] == 'delivery_limit', props.headers
assert ch.basic_get(queue='poison', auto_ack=True)[0] is None

conn.close()
print('ok')
