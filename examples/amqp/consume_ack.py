#!/usr/bin/env python3
# A consumer with manual acknowledgements: takes what is in
# my_durable_queue, prints each body with its redelivered flag and acks it,
# and stops when the queue is empty. AMQP_HOST, AMQP_PORT as in
# durable_publish.py.
import os

import pika

params = pika.ConnectionParameters(host=os.environ.get('AMQP_HOST', 'localhost'),
                                   port=int(os.environ.get('AMQP_PORT', '5672')))
connection = pika.BlockingConnection(params)
channel = connection.channel()
channel.queue_declare(queue='my_durable_queue', durable=True, passive=True)
channel.basic_qos(prefetch_count=10)
while True:
    method, props, body = channel.basic_get(queue='my_durable_queue', auto_ack=False)
    if method is None:
        break
    print("%s delivery_mode=%s redelivered=%s" % (body.decode(), props.delivery_mode, method.redelivered))
    channel.basic_ack(method.delivery_tag)
connection.close()
